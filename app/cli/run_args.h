// The options that say where a run executes and on what layout, shared by `flotilla run`,
// `runs resume` and `runs fork` (docs/cli.md): each becomes a value of the runs layer
// (runs/placement.h), which the service turns into a place.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "app/cli/cli.h"
#include "runs/placement.h"

namespace flotilla::cli {

// What the options of the place ask for. `where` is nullopt when none was given.
struct PlaceArgs {
  std::optional<runs::Placement> where;
  bool no_bind = false;                          // --no-bind (launch pins no rank to cores)
  std::optional<runs::RecoveryChoice> recovery;  // --auto-recover ... (also in where, for --nodes)
};

// Reads `--local`, `--nodes A,B [--nproc-per-node N] [--master-port P]` or
// `--cluster NAME [--nodes N] [--tasks-per-node T] [--gpus-per-node G] [--time HH:MM:SS]
// [--partition P] [--account A] [--signal-lead S] [--auto-resume]`, `--no-bind` and the recovery
// options (read_recovery); UsageError for a bad value, two places, or an option without its place.
// `recovery_needs_nodes`: --auto-recover only with --nodes (a new run); else also without a place
// (a resume: the run's own nodes).
PlaceArgs read_place(ArgReader& args, bool recovery_needs_nodes = true);

// Reads `--auto-recover [--spare C,D] [--max-recoveries K] [--recover-after S] [--mirror-checkpoints]`;
// nullopt without --auto-recover (UsageError for its options without it).
std::optional<runs::RecoveryChoice> read_recovery(ArgReader& args);

// Reads `--layout dp=N,tp=N,pp=N,zero=N` (any of them); UsageError naming the bad part.
runs::Layout read_layout(ArgReader& args);

// "a,b" -> {"a","b"}; UsageError (naming `option`) for an empty or repeated name.
std::vector<std::string> parse_node_list(const std::string& text, const std::string& option = "--nodes");

}  // namespace flotilla::cli
