// The planner's memory prediction against a real run, shared by test_plan_memory_rss (full
// training) and test_plan_memory_rss_lora: `flotilla-worker train` runs a small config in a child
// process and its peak RSS (wait4's ru_maxrss) is compared with make_plan()'s total, within 15%.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "check.h"
#include "engine/config/config_io.h"
#include "engine/config/config_validate.h"
#include "engine/interop/hf_model.h"
#include "engine/plan/planner.h"

extern char** environ;

namespace plan_rss {

using namespace flotilla;

// Runs argv with stdout/stderr to log; returns the exit status and the child's peak RSS in bytes.
inline int run_child(const std::vector<std::string>& args, const std::string& log, uint64_t* peak_rss) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  struct rusage usage {};
  if (wait4(pid, &status, 0, &usage) != pid) return -1;
  *peak_rss = static_cast<uint64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// One config's prediction against its run; `model` is the [model] table's body, `extra` more
// tables (and `train` the [train] table's body, by default one step of 8 x 128).
inline void check_config(const std::string& name, const std::string& model, const std::string& extra = "",
                         const std::string& train = "steps = 1\nmicro_batch = 8\nseq_len = 128\n") {
  const std::string dir = std::string(FLOTILLA_TEST_TMP) + "/test_plan_memory_rss-" + name;
  std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str());
  const std::string config_path = dir + "/run.toml";
  // Big enough that every component matters (weights ~17 MB, activations ~50 MB, logits ~17 MB).
  std::ofstream(config_path) << "[run]\nname = \"rss\"\nout_dir = \"" << dir << "/run\"\n"
                             << "[model]\n"
                             << model << "[data]\nsynthetic_tokens = 200000\n"
                             << "[train]\n"
                             << train << "[eval]\nbatches = 1\n"
                             << extra;
  RunConfig config = load_config_file(config_path);
  interop::apply_hf_init_from(config);  // as train does: the folder decides the shape
  validate_or_throw(config, 1);
  const Plan plan = make_plan(config, cpu_profile_nominal(config.run.threads));
  const double predicted = static_cast<double>(plan.peak().total());

  uint64_t rss = 0;
  const std::string log = dir + "/train.log";
  const int status = run_child({FLOTILLA_WORKER_PATH, "train", "--config", config_path, "--resume", "none",
                                "--quiet", "--no-stdout-metrics"},
                               log, &rss);
  CHECK_MSG(status == 0, "%s: train exited %d:\n%s", name.c_str(), status, read_file(log).c_str());
  if (status != 0) return;
  // The planner's runtime term is the baseline of a CPU-only worker. A worker built with CUDA maps
  // cuBLAS/NCCL at start (~200 MiB resident before training allocates anything); the run_start
  // record reports the baseline it measured, and we compare the training allocations on top of it.
  uint64_t baseline = 0;
  std::ifstream metrics(dir + "/run/metrics.jsonl");
  std::string line;
  while (std::getline(metrics, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.value("type", "") == "run_start")
      baseline = j.value("baseline_rss_bytes", 0ull);
  }
  CHECK(baseline > 0);
  const uint64_t runtime = plan.peak().runtime;
  if (baseline > runtime) rss -= baseline - runtime;
  std::printf("%s: worker baseline RSS %.1f MiB (planner assumes %.1f MiB)\n", name.c_str(),
              baseline / 1048576.0, runtime / 1048576.0);
  const double ratio = predicted / static_cast<double>(rss);
  std::printf(
      "%s: predicted %.1f MiB (weights+grads+adam %.1f, activations %.1f, workspace %.1f, runtime %.1f), "
      "measured peak RSS %.1f MiB, ratio %.3f\n",
      name.c_str(), predicted / 1048576.0,
      static_cast<double>(plan.peak().frozen_weights + plan.peak().weights + plan.peak().gradients +
                          plan.peak().adam_m + plan.peak().adam_v) /
          1048576.0,
      static_cast<double>(plan.peak().activations) / 1048576.0,
      static_cast<double>(plan.peak().workspace) / 1048576.0,
      static_cast<double>(plan.peak().runtime) / 1048576.0, static_cast<double>(rss) / 1048576.0, ratio);
  CHECK_MSG(std::fabs(ratio - 1.0) <= 0.15, "%s: predicted %.1f MiB vs measured %.1f MiB", name.c_str(),
            predicted / 1048576.0, static_cast<double>(rss) / 1048576.0);
}

// The MFU ceiling: given, so the worker does not measure it. Where no quiet measurement is kept (a
// busy machine measures again in every run) that benchmark's buffers stay in the heap and raised
// the peak by 16-28 MiB on the 2-core machine: a start-up transient, not the run's memory.
inline void give_mfu_ceiling() { setenv("FLOTILLA_PEAK_FLOPS", "1e12", 1); }

}  // namespace plan_rss
