// A program that cannot load the CUDA plugin (it does not export the engine, like the app) gets the
// GPU part of its in-process machine probe from the flotilla-worker beside it: the same status,
// device count and plugin path as `flotilla-worker probe --json`, never a dlopen failure of its own.
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "check.h"
#include "engine/backend/cuda_plugin.h"
#include "engine/core/probe.h"

static std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  pclose(p);
  return out;
}

int main() {
  namespace cp = flotilla::cuda_plugin;
  CHECK(!cp::host());  // this test binary exports nothing
  const auto worker =
      nlohmann::json::parse(run(std::string(FLOTILLA_WORKER_PATH) + " probe --json --no-peak"));
  const flotilla::ProbeResult p = flotilla::probe_machine(false);
  CHECK_MSG(p.gpu_status == worker["gpu"]["status"].get<std::string>(), "in-process '%s' vs worker '%s'",
            p.gpu_status.c_str(), worker["gpu"]["status"].get<std::string>().c_str());
  CHECK(p.gpus.size() == worker["gpu"]["count"].get<size_t>());
  CHECK(p.gpu_status.find("cannot load the CUDA plugin") == std::string::npos);
  if (cp::built()) {
    const auto& plugin = worker["gpu"]["plugin"];
    CHECK(p.cuda_plugin == (plugin["path"].is_string() ? plugin["path"].get<std::string>() : std::string()));
    CHECK(p.cuda_libraries.size() == plugin["libraries"].size());
    CHECK(p.cuda_runtime == (worker["versions"]["cuda_runtime"].is_string()
                                 ? worker["versions"]["cuda_runtime"].get<std::string>()
                                 : std::string()));
  }
  std::printf("in-process probe: %s, %zu GPU(s), plugin %s\n", p.gpu_status.c_str(), p.gpus.size(),
              p.cuda_plugin.empty() ? "(none)" : p.cuda_plugin.c_str());
  return flotilla_test::summary("packaging_probe_through_worker");
}
