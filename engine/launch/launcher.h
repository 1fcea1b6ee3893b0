// The launch supervisor: torchrun's job for Flotilla (DESIGN.md §2.4, docs/reliability.md §1
// "Supervision").
//
// It starts one rank per device (or CPU slot) as a child process with the torchrun environment,
// merges their output, and watches two signals of life per rank: process exit (waitpid) and a
// heartbeat pipe (FLOTILLA_HEARTBEAT_FD) on which the trainer writes its step and in-flight
// collective every second. One non-obvious decision: progress is judged by the heartbeat's STEP
// advancing, not by the pipe being alive, so a rank stuck in a collective (alive, beating) is
// caught by the step timeout just like a SIGSTOPped one (no beats at all); the report says which.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace flotilla {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;      // 0 = pick a free port (single node only)
  int max_restarts = 0;         // crash restarts; preemptions do not count
  double init_timeout_s = 300;  // first step must arrive within this (torchtitan's init 300 s)
  double step_timeout_s = 100;  // later steps: no progress for this long = stalled (at
                                // least 3x the slowest step seen: see stall_limit_s)
  double term_grace_s = 10;     // SIGTERM -> this long -> SIGKILL
  bool bind_cores = true;       // pin each local rank to its share of the cores
  // GPU pinning (gpu_pinning.h): with device "cuda" or a non-empty gpus list, local rank l gets
  // FLOTILLA_CUDA_DEVICE = gpus[l] (or l), and the launch is refused before any rank starts when
  // the node has fewer GPUs than ranks.
  std::string device;                    // the run's device, e.g. from worker_run_device(); "" = unknown
  std::vector<int> gpus;                 // --gpus: one CUDA ordinal per local rank
  int gpu_count = -1;                    // GPUs visible here; -1 = ask (visible_gpu_count)
  std::vector<std::string> worker_args;  // the subcommand and its arguments, e.g. {"train", "--config", ...}
  std::string worker_binary;             // default: this executable (/proc/self/exe)
  std::FILE* log = stderr;               // merged rank output and supervisor messages
};

// How one attempt ended.
struct AttemptResult {
  int exit_code = 0;            // the group's exit code (engine/core/error.h)
  int failed_rank = -1;         // root-cause rank, -1 when none failed
  int signal = 0;               // signal that killed the failed rank (0 if it exited)
  int rank_exit_code = 0;       // exit code of the failed rank
  int64_t last_step = 0;        // last step the failed rank reported
  std::string last_collective;  // its last in-flight collective, if any
  std::string reason;           // one line for the user
  bool retryable = false;
  bool preempted = false;  // counts as preemption (no restart budget used)
};

// Runs the group with restarts; returns the final exit code.
int run_launch(const LaunchOptions& options);

// Seconds without progress after which a rank at `step` is stalled: init_timeout_s before the
// first step; after it step_timeout_s, raised to 3x the slowest step the rank has taken, so a
// model whose steps take minutes (a large model on CPUs) is not taken for a hung one. 0: never.
double stall_limit_s(const LaunchOptions& options, int64_t step, double slowest_step_s);

// Classification of a rank's exit code: retry after a crash? (config, data, usage, checkpoint,
// I/O and out-of-memory errors never: a restart would fail the same way).
bool exit_code_retryable(int code);

}  // namespace flotilla
