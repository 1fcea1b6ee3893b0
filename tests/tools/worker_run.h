// Test helpers that drive the real flotilla-worker binary: run to completion, run in the
// background and signal it, read a run's metrics.jsonl. Qt-free (engine tests use them).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/checkpoint/checkpoint.h"

namespace flotilla_test {

struct ProcResult {
  int exit_code = -1;  // exit status, or 128 + signal
  std::string output;  // stdout + stderr
};

// Starts argv with extra environment entries ("K=V"); stdout+stderr go to log_path.
inline pid_t spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                   const std::string& log_path) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    for (const auto& e : env) putenv(strdup(e.c_str()));
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

inline int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

inline ProcResult run_worker(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  static int counter = 0;
  const std::string log = std::string(FLOTILLA_TEST_TMP) + "/worker-" + std::to_string(getpid()) + "-" +
                          std::to_string(counter++) + ".log";
  std::vector<std::string> argv = {FLOTILLA_WORKER_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcResult r;
  r.exit_code = wait_exit(spawn(argv, env, log));
  r.output = read_file(log);
  return r;
}

// Every record of a metrics.jsonl (complete lines only).
inline std::vector<nlohmann::json> read_metrics(const std::string& run_dir) {
  std::vector<nlohmann::json> out;
  std::ifstream f(run_dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded()) out.push_back(j);
  }
  return out;
}

// step -> loss (float32) of the LAST step record for each step (a resumed run re-runs steps).
inline std::map<int64_t, float> step_losses(const std::string& run_dir) {
  std::map<int64_t, float> out;
  for (const auto& r : read_metrics(run_dir))
    if (r["type"] == "step") out[r["step"].get<int64_t>()] = static_cast<float>(r["loss"].get<double>());
  return out;
}

// A byte count of the device model's start-up memory event (measured_bytes, predicted_bytes,
// planner_bytes; written as strings), or -1 when the run has no such event.
inline double memory_event_bytes(const std::string& run_dir, const char* field = "measured_bytes") {
  for (const auto& r : read_metrics(run_dir))
    if (r["type"] == "event" && r.contains(field)) return std::atof(r[field].get<std::string>().c_str());
  return -1;
}

// Last step with a step record in a run's metrics (0 when none).
inline int64_t last_step(const std::string& run_dir) {
  const auto l = step_losses(run_dir);
  return l.empty() ? 0 : l.rbegin()->first;
}

// The bytes of one section of `rank`'s file in the run's committed checkpoint for `step`
// (verified by the checkpoint store; empty when the section is absent).
inline std::vector<uint8_t> checkpoint_section(const std::string& run_dir, int64_t step, const std::string& name,
                                               int rank = 0) {
  flotilla::CheckpointStore store(run_dir + "/checkpoints");
  char leaf[32];
  std::snprintf(leaf, sizeof leaf, "/step-%08lld", static_cast<long long>(step));
  for (auto& t : store.load_dir(run_dir + "/checkpoints" + leaf, rank).tensors)
    if (t.name == name) return t.data;
  return {};
}

inline std::string fresh_dir(const std::string& name) {
  const std::string dir = std::string(FLOTILLA_TEST_TMP) + "/" + name + "-" + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
}

// Every regular file under dir, relative path -> bytes (symbolic links are not followed into), so a
// test can say a refusal changed nothing byte for byte.
inline std::map<std::string, std::string> snapshot_files(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    if (e.is_regular_file())
      out[std::filesystem::relative(e.path(), dir).string()] = read_file(e.path().string());
  return out;
}

// Polls until pred() or timeout; returns pred().
template <typename F>
inline bool wait_until(F pred, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

}  // namespace flotilla_test
