// `flotilla-worker probe --json` output conforms to docs/probe-schema.json and tells the truth
// about this machine (core count, memory, and an explicit reason when there is no GPU).
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "check.h"
#include "json_schema.h"

static std::string run(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  *status = pclose(p);
  return out;
}

int main() {
  std::ifstream sf(std::string(FLOTILLA_SOURCE_DIR) + "/docs/probe-schema.json");
  CHECK(sf.good());
  const auto schema = nlohmann::json::parse(sf);

  int status = -1;
  const std::string out = run(std::string(FLOTILLA_WORKER_PATH) + " probe --json", &status);
  CHECK(status == 0);
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(out);
  } catch (const std::exception& e) {
    CHECK_MSG(false, "probe --json is not JSON: %s", e.what());
    return flotilla_test::summary("probe_json");
  }
  std::vector<std::string> errors;
  flotilla_test::validate_schema(schema, doc, "$", errors);
  for (const auto& e : errors) std::fprintf(stderr, "schema: %s\n", e.c_str());
  CHECK(errors.empty());

  // The checker itself must be able to fail: a document missing a key and with a wrong type.
  auto broken = doc;
  broken.erase("memory");
  broken["cpu"]["logical_cpus"] = "two";
  std::vector<std::string> broken_errors;
  flotilla_test::validate_schema(schema, broken, "$", broken_errors);
  CHECK(broken_errors.size() >= 2);

  // Values match the machine.
  CHECK(doc["cpu"]["logical_cpus"].get<long>() == sysconf(_SC_NPROCESSORS_ONLN));
  CHECK(doc["memory"]["total_bytes"].get<double>() > 256.0 * 1024 * 1024);
  const auto gpu_status = doc["gpu"]["status"].get<std::string>();
  if (doc["gpu"]["count"].get<int>() == 0) {
    CHECK(gpu_status.rfind("no GPU: ", 0) == 0);
    CHECK(gpu_status.size() > 10);  // the reason is stated
  } else {
    CHECK(gpu_status == "ok");
  }
  CHECK(doc["gpu"]["devices"].size() == doc["gpu"]["count"].get<size_t>());

  // The text form mentions the same facts.
  const std::string text = run(std::string(FLOTILLA_WORKER_PATH) + " probe", &status);
  CHECK(status == 0);
  CHECK(text.find("CPU") != std::string::npos && text.find("Memory") != std::string::npos);
  CHECK(text.find(doc["cpu"]["model"].get<std::string>()) != std::string::npos);

  // Unknown options are refused with exit code 2 (usage).
  run(std::string(FLOTILLA_WORKER_PATH) + " probe --jsn 2>/dev/null", &status);
  CHECK(WEXITSTATUS(status) == 2);
  return flotilla_test::summary("probe_json");
}
