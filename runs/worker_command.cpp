// The worker binary and its command line (see worker_command.h for the launch decision).
#include "runs/worker_command.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "engine/core/error.h"

namespace flotilla::runs {
namespace {

namespace fs = std::filesystem;

constexpr char kWorkerName[] = "flotilla-worker";

bool executable_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

}  // namespace

std::string find_worker(const std::string& explicit_path) {
  if (!explicit_path.empty()) {
    if (executable_file(explicit_path)) return fs::absolute(explicit_path).lexically_normal().string();
    throw_usage("the worker " + explicit_path + " is missing or not executable");
  }
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  const fs::path beside = self.parent_path() / kWorkerName;
  if (!ec && executable_file(beside)) return beside.string();
  if (const char* path = std::getenv("PATH")) {
    std::string dirs = path;
    size_t start = 0;
    while (start <= dirs.size()) {
      const size_t colon = dirs.find(':', start);
      const std::string dir =
          dirs.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
      if (!dir.empty() && executable_file(fs::path(dir) / kWorkerName))
        return (fs::absolute(fs::path(dir) / kWorkerName)).lexically_normal().string();
      if (colon == std::string::npos) break;
      start = colon + 1;
    }
  }
  throw_usage("flotilla-worker was not found next to " + (ec ? std::string("this program") : self.string()) +
              " or on PATH. It is built together with Flotilla into the same bin/ folder: build the "
              "flotilla-worker target (or reinstall Flotilla), or put its folder on PATH");
}

int ranks_of(const RunConfig& c) {
  const int64_t n = static_cast<int64_t>(c.parallel.dp) * c.parallel.tp * c.parallel.pp;
  return static_cast<int>(std::max<int64_t>(1, n));
}

std::vector<std::string> train_argv(const TrainCommand& c) {
  std::vector<std::string> argv = {c.worker,           "launch",
                                   "--nproc-per-node", std::to_string(std::max(1, c.ranks)),
                                   "--master-port",    "0",
                                   "--init-timeout",   std::to_string(static_cast<int>(c.init_timeout_s)),
                                   "--max-restarts",   std::to_string(std::max(0, c.max_restarts))};
  if (c.no_bind) argv.push_back("--no-bind");
  for (const char* a : {"--", "train", "--config"}) argv.push_back(a);
  argv.push_back(c.config_path);
  argv.push_back("--no-stdout-metrics");
  if (c.resume) {
    argv.push_back("--resume");
    argv.push_back("auto");
  }
  for (const auto& s : c.sets) {
    argv.push_back("--set");
    argv.push_back(s);
  }
  return argv;
}

std::vector<std::string> demo_argv(const std::string& worker, const std::string& run_dir, int steps,
                                   const std::vector<std::string>& sets) {
  std::vector<std::string> argv = {worker, "demo", "--out-dir", run_dir};
  if (steps > 0) {
    argv.push_back("--steps");
    argv.push_back(std::to_string(steps));
  }
  for (const auto& s : sets) {
    argv.push_back("--set");
    argv.push_back(s);
  }
  return argv;
}

std::string command_line(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    const bool plain = !a.empty() && a.find_first_of(" '\"\\$`!*?;&|<>()\n\t") == std::string::npos;
    if (plain) {
      out += a;
      continue;
    }
    out += '\'';
    for (char ch : a) out += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    out += '\'';
  }
  return out;
}

}  // namespace flotilla::runs
