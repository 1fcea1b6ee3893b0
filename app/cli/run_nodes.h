// `flotilla run CONFIG --nodes a,b`: one run over M stored SSH nodes × N local ranks.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "app/cli/cli.h"
#include "engine/config/run_config.h"

namespace flotilla::cli {

// What `--auto-recover` and its options ask for (run --nodes, runs resume, runs attach).
struct RecoveryRequest {
  bool auto_recover = false;
  std::vector<std::string> spares;  // node names
  int max_recoveries = 3;
  double recover_after_s = 20;
  bool mirror = false;              // --mirror-checkpoints: survive the loss of the master
  bool no_bind = false;             // restarts pass launch --no-bind
};

struct NodesRunRequest {
  RunConfig config;                  // loaded with every --set applied, run.name final
  std::string name;                  // the run's (unique) name
  std::optional<double> budget_usd;
  std::vector<std::string> nodes;    // node names; the first is the master
  std::optional<int> nproc_per_node; // default: dp*tp*pp / nodes
  std::optional<int> master_port;    // default: picked
  bool no_bind = false;              // launch --no-bind (ranks not pinned to cores)
  bool quiet = false;
  RecoveryRequest recovery;          // --auto-recover and its options
};

// Connects (strict host keys), deploys, starts, tails rank 0's metrics into the store, returns
// the run's exit status (node 0's worker), or kExitRefused before anything starts when a host is
// not trusted.
int run_on_nodes(const Context& ctx, const NodesRunRequest& request);

// `flotilla runs attach RUN`: re-attaches to a run on nodes whose watching process died: reconnects
// to every node, tails rank 0's metrics from the committed offset until the run ends, stops every
// node on SIGINT/SIGTERM, records the final status and returns node 0's exit status (kExitRefused
// for a run that is not on nodes, already ended, or on an untrusted host).
// With recovery.auto_recover, a preemption after attaching is recovered as with run --nodes.
int attach_nodes_run(const Context& ctx, const std::string& run, bool quiet, const RecoveryRequest& recovery = {});

// Reads --auto-recover, --spare, --max-recoveries, --recover-after from `args`;
// UsageError for a bad value or an option without --auto-recover.
RecoveryRequest read_recovery_options(ArgReader& args);

// `flotilla runs resume RUN` for a run on SSH nodes: every rank starts again in its run dir on the
// run's nodes (one that does not answer is replaced by a spare, or its ranks go to the others) and
// resumes from the master's newest checkpoint; then watched like `run --nodes`.
int resume_nodes_run(const Context& ctx, const std::string& run, const RecoveryRequest& recovery, bool quiet);

// `flotilla runs resume RUN` (run.cpp): a local run restarts its worker with --resume auto; a run
// on nodes goes to resume_nodes_run. `recovery` (--auto-recover ...) is for runs on nodes only.
int resume_run(const Context& ctx, const std::string& run, const RecoveryRequest& recovery = {}, bool quiet = false);

// `flotilla runs attach RUN` for a run on this machine whose watching process died while its worker
// lives on: watches it from the committed offset until it ends (run.cpp). kExitRefused when the
// run has no live worker.
int attach_local_run(const Context& ctx, const std::string& run, bool quiet);

// `flotilla runs checkpoints RUN [--json]`: the committed checkpoints of a run, read from its
// master node for a run on nodes, else from the store (with the dirs on this machine).
int list_run_checkpoints(const Context& ctx, const std::string& run, bool json);
// `flotilla runs fetch RUN [--step N] [--out DIR]`: downloads a checkpoint of a run on nodes
// (default: the newest) into DIR/step-NNNNNNNN (default DIR: <workspace>/checkpoints/<run>),
// written to a .part folder first; prints the local path (usable by flotilla-worker export/sample).
int fetch_run_checkpoint(const Context& ctx, const std::string& run, std::optional<int64_t> step,
                         const std::string& out_dir);

// `flotilla runs checkpoint RUN` for a run on nodes: SIGUSR1 to the master's launch (every rank
// agrees at the next step, so one node is enough): a checkpoint now, training goes on.
int checkpoint_nodes_run(const Context& ctx, const std::string& run);

// "a,b" -> {"a","b"}; UsageError (naming `option`) for an empty or repeated name.
std::vector<std::string> parse_node_list(const std::string& text, const std::string& option = "--nodes");

}  // namespace flotilla::cli
