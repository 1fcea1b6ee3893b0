// `flotilla-worker launch` passes SIGUSR1 ("checkpoint now", what the app's Checkpoint now sends
// to its child) on to its ranks: a 2-rank run gets a checkpoint with reason "request" at the next
// step boundary and keeps training; each rank wrote its part; SIGTERM afterwards still stops the
// group with exit 10 (preempted). Before the forwarding existed, SIGUSR1 killed the launcher
// (default action) and left the ranks to die with it.
#include <signal.h>

#include <filesystem>

#include "check.h"
#include "worker_run.h"

using namespace flotilla_test;

namespace {

std::string config_text() {
  return R"(
[run]
name = "signals"
seed = 5
threads = 1
[model]
preset = "custom"
n_layer = 1
n_head = 2
n_embd = 32
vocab_size = 128
max_seq_len = 32
[data]
synthetic_tokens = 30000
[parallel]
dp = 2
[train]
steps = 100000
micro_batch = 2
seq_len = 16
[checkpoint]
every = 0
keep_last = 3
)";
}

int count_checkpoints(const std::string& run_dir, const std::string& reason) {
  int n = 0;
  for (const auto& j : read_metrics(run_dir))
    if (j.value("type", "") == "checkpoint" && j.value("reason", "") == reason) ++n;
  return n;
}

}  // namespace

int main() {
  const std::string root = fresh_dir("launch_signals");
  const std::string cfg = root + "/run.toml";
  const std::string out = root + "/run";
  write_text(cfg, config_text());
  const pid_t launcher = spawn({FLOTILLA_WORKER_PATH, "launch", "--nproc-per-node", "2", "--master-port", "0",
                                "--", "train", "--config", cfg, "--out-dir", out},
                               {"OMP_NUM_THREADS=1", "FLOTILLA_PEAK_FLOPS=1e11"}, out + ".log");
  CHECK(wait_until([&] { return last_step(out) >= 3; }, 60));
  CHECK(count_checkpoints(out, "request") == 0);

  kill(launcher, SIGUSR1);
  CHECK_MSG(wait_until([&] { return count_checkpoints(out, "request") == 1; }, 30), "%s",
            read_file(out + ".log").c_str());
  int64_t saved_at = 0;
  for (const auto& j : read_metrics(out))
    if (j.value("type", "") == "checkpoint") saved_at = j.value("step", int64_t{0});
  CHECK(saved_at >= 3);
  // The run goes on after the checkpoint.
  CHECK(wait_until([&] { return last_step(out) >= saved_at + 3; }, 30));
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(saved_at));
  const std::filesystem::path dir = std::filesystem::path(out) / "checkpoints" / name;
  CHECK_MSG(std::filesystem::exists(dir / "rank-0.bin") && std::filesystem::exists(dir / "rank-1.bin"), "%s",
            dir.c_str());

  // A second request is forwarded too (counted, not latched).
  kill(launcher, SIGUSR1);
  CHECK(wait_until([&] { return count_checkpoints(out, "request") == 2; }, 30));

  kill(launcher, SIGTERM);
  const int code = wait_exit(launcher);
  CHECK_MSG(code == 10, "launcher exit %d: %s", code, read_file(out + ".log").c_str());
  CHECK(read_file(out + ".log").find("checkpoint requested (SIGUSR1), forwarding to all ranks") != std::string::npos);
  return summary("launch_signals");
}
