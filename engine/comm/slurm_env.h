// Slurm's task environment mapped onto the torchrun contract the worker reads (rendezvous.h).
//
// Decision: the mapping writes the torchrun variables into the process environment once, at the
// worker's start, and only when RANK is absent and SLURM_PROCID is present; so everything
// downstream (rendezvous, GPU pinning, fault injection) sees one contract and a hand-set RANK
// always wins. MASTER_ADDR is the first host of SLURM_JOB_NODELIST as `scontrol show hostnames`
// expands it, then that node's NodeAddr from `scontrol show node` (node names need not resolve);
// MASTER_PORT is derived from the job id and SLURM_RESTART_COUNT, so every task of one attempt
// agrees without talking and a requeued attempt does not meet the previous one's lingering port.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace flotilla::comm {

using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
// Runs a command (argv) and returns its stdout, nullopt when it could not run or failed.
using CommandRunner = std::function<std::optional<std::string>(const std::vector<std::string>& argv)>;

// The variables to set ("RANK", "0"), in order; empty when RANK is set or SLURM_PROCID is not.
// Throws Error(kUsage) naming the SLURM_ variable when one is missing or malformed, or when the
// master's host cannot be found.
std::vector<std::pair<std::string, std::string>> slurm_torchrun_env(const EnvLookup& env,
                                                                    const CommandRunner& run);

// Tasks on node `node_id` from SLURM_TASKS_PER_NODE ("2(x3),1" -> 2,2,2,1); 0 when malformed.
int slurm_tasks_on_node(const std::string& tasks_per_node, int node_id);

// The real environment and `scontrol`: sets the variables of slurm_torchrun_env with setenv.
// Returns how many were set.
int apply_slurm_env();

}  // namespace flotilla::comm
