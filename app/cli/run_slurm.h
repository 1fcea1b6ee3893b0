// `flotilla run CONFIG --cluster NAME`: one run as a Slurm job on a stored cluster (runs/slurm_run.h).
#pragma once

#include <optional>
#include <string>

#include "app/cli/cli.h"
#include "engine/config/run_config.h"

namespace flotilla::cli {

struct ClusterRunRequest {
  RunConfig config;  // loaded with every --set applied, run.name final
  std::string name;
  std::string cluster;
  std::optional<double> budget_usd;
  int nodes = 1;
  std::optional<int> tasks_per_node;  // --tasks-per-node (default dp*tp*pp / nodes)
  int gpus_per_node = 0;
  std::string time_limit = "01:00:00";
  std::string partition, account;
  int signal_lead_s = 300;
  bool auto_resume = false;
  bool quiet = false;
};

// Connects to the login node (strict host keys: kExitRefused with the trust command when not
// trusted), deploys, submits, watches until the job has left the queue, prints the summary and
// returns the worker's exit status. Ctrl-C cancels the job (TERM: checkpoint, then exit).
int run_on_cluster(const Context& ctx, const ClusterRunRequest& request);

// `flotilla runs attach RUN` for a Slurm run: reconnects to the login node and watches the job from
// the committed offset until it leaves the queue (kExitRefused when the run has ended).
int attach_cluster_run(const Context& ctx, const std::string& run, bool quiet);

// `flotilla runs resume RUN` for a Slurm run that ended stopped or failed: submits its batch script
// again (runs::resubmit_slurm_run), prints the new job id and watches it as `run --cluster` does.
// kExitRefused, with what to do instead, when the run has not ended or its old job is still queued.
int resume_cluster_run(const Context& ctx, const std::string& run, bool quiet);

}  // namespace flotilla::cli
