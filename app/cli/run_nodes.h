// `flotilla run CONFIG --nodes a,b`: one run over M stored SSH nodes × N local ranks.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "app/cli/cli.h"
#include "engine/config/run_config.h"

namespace flotilla::cli {

struct NodesRunRequest {
  RunConfig config;                  // loaded with every --set applied, run.name final
  std::string name;                  // the run's (unique) name
  std::optional<double> budget_usd;
  std::vector<std::string> nodes;    // node names; the first is the master
  std::optional<int> nproc_per_node; // default: dp*tp*pp / nodes
  std::optional<int> master_port;    // default: picked
  bool no_bind = false;              // launch --no-bind (ranks not pinned to cores)
  bool quiet = false;
  bool auto_recover = false;         // restart a preempted run by itself (noderun::Recovery)
  std::vector<std::string> spares;   // replacement nodes for --auto-recover
  int max_recoveries = 3;
  double recover_after_s = 20;
};

// Connects (strict host keys), deploys, starts, tails rank 0's metrics into the store, returns
// the run's exit status (node 0's worker), or kExitRefused before anything starts when a host is
// not trusted.
int run_on_nodes(const Context& ctx, const NodesRunRequest& request);

// `flotilla runs attach RUN`: re-attaches to a run on nodes whose watching process died: reconnects
// to every node, tails rank 0's metrics from the committed offset until the run ends, stops every
// node on SIGINT/SIGTERM, records the final status and returns node 0's exit status (kExitRefused
// for a run that is not on nodes, already ended, or on an untrusted host).
int attach_nodes_run(const Context& ctx, const std::string& run, bool quiet);

// "a,b" -> {"a","b"}; UsageError (naming `option`) for an empty or repeated name.
std::vector<std::string> parse_node_list(const std::string& text, const std::string& option = "--nodes");

}  // namespace flotilla::cli
