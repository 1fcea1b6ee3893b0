// Where a run executes, as a value: this machine, a set of stored SSH nodes, or a stored Slurm
// cluster, with what each needs to start there; and a layout override (dp/tp/pp/ZeRO and the rank
// count) for a start, a resume or a fork. The front ends build these from their flags and forms;
// only the runs layer (runs/service.h and the places behind it) looks inside.
//
// Decision: a placement is data, not a type per kind, so a queue, a form or a command line can hold
// "where" without knowing how a place works; the service turns it into a Place (runs/place.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace flotilla::runs {

enum class PlaceKind { kHere, kNodes, kSlurm };

// What a resume or fork changes of the layout a run was started with (nullopt: as it was). The
// runs layer passes them as config overrides (--set parallel.dp=N, ...) and launches
// dp * tp * pp ranks; the worker re-cuts the checkpoint to the new layout (engine/checkpoint).
struct Layout {
  std::optional<int> dp, tp, pp, zero;
  bool empty() const { return !dp && !tp && !pp && !zero; }
  // "dp=2 tp=1" for the fields set ("" when none).
  std::string text() const;
  // The `--set` overrides this layout stands for ("parallel.dp=2", ...).
  std::vector<std::string> sets() const;
};

// Automatic recovery after a preemption (runs on SSH nodes; a Slurm run requeues with auto_resume).
struct RecoveryChoice {
  bool enabled = false;
  std::vector<std::string> spares;  // stored node names, in order of preference
  int max_recoveries = 3;
  double settle_seconds = 20;
  bool mirror = false;  // copy each checkpoint to the workspace (a lost master is survivable)
};

struct Placement {
  PlaceKind kind = PlaceKind::kHere;

  // kNodes: stored node names, the master first.
  std::vector<std::string> nodes;
  std::optional<int> nproc_per_node;  // default: dp*tp*pp / nodes
  std::optional<int> master_port;     // default: picked
  bool no_bind = false;
  RecoveryChoice recovery;

  // kSlurm: a stored cluster and the job's shape.
  std::string cluster;
  int slurm_nodes = 1;
  std::optional<int> tasks_per_node;  // default: dp*tp*pp / nodes
  int gpus_per_node = 0;
  std::string time_limit = "01:00:00";
  std::string partition, account;  // "": the cluster's defaults
  int signal_lead_s = 300;
  bool auto_resume = false;

  static Placement here() { return {}; }
  static Placement on_nodes(std::vector<std::string> names) {
    Placement p;
    p.kind = PlaceKind::kNodes;
    p.nodes = std::move(names);
    return p;
  }
  static Placement on_cluster(std::string name) {
    Placement p;
    p.kind = PlaceKind::kSlurm;
    p.cluster = std::move(name);
    return p;
  }
  // "this machine", "nodes a, b", "slurm cluster hpc".
  std::string text() const;
};

}  // namespace flotilla::runs
