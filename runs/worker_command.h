// Which flotilla-worker a run starts, and its command line: one policy, one place, for the CLI,
// the app and the tests.
//
// Decision: every training run goes through `flotilla-worker launch`, one rank included: that is
// what gives a run GPU pinning (and the refusal when GPUs are missing), stall detection with a
// root-cause report, signal forwarding (SIGTERM, SIGINT, SIGUSR1) and crash restarts from the last
// verified checkpoint (run.max_restarts). Start-up and the first step get an hour (a large model
// on CPUs takes minutes a step); later steps are held to launch's adaptive limit. Metrics go to
// <run dir>/metrics.jsonl only (--no-stdout-metrics): the runs layer reads the file by byte
// offset, never the worker's pipe, so no reader's death can stall or kill training.
#pragma once

#include <string>
#include <vector>

#include "engine/config/run_config.h"

namespace flotilla::runs {

// The worker binary: `explicit_path` when given (it must be an executable file), else
// flotilla-worker next to this process's executable (the build and the packages put both in one
// bin/ folder), else on PATH. Throws flotilla::Error (kUsage) saying where it looked and what to do.
std::string find_worker(const std::string& explicit_path = "");

// dp * tp * pp (at least 1): the ranks of a run on one machine.
int ranks_of(const RunConfig& config);

struct TrainCommand {
  std::string worker;       // find_worker()
  std::string config_path;  // the run's config file
  int ranks = 1;            // ranks_of(config)
  int max_restarts = 2;     // run.max_restarts, or the CLI's --max-restarts
  double init_timeout_s = 3600;
  bool resume = false;            // --resume auto: continue from the newest verified checkpoint
  bool no_bind = false;           // launch --no-bind
  std::vector<std::string> sets;  // --set KEY=VALUE, in order
};

// worker launch --nproc-per-node N --master-port 0 --init-timeout S --max-restarts R [--no-bind]
//        -- train --config C --no-stdout-metrics [--resume auto] [--set K=V]...
std::vector<std::string> train_argv(const TrainCommand& command);
// worker demo --out-dir DIR [--steps N] [--set K=V]...  (steps <= 0: the demo's own length)
std::vector<std::string> demo_argv(const std::string& worker, const std::string& run_dir, int steps,
                                   const std::vector<std::string>& sets = {});
// The command line as one shell-quoted line, for logs and status reasons.
std::string command_line(const std::vector<std::string>& argv);

}  // namespace flotilla::runs
