// The launch choices of a run on a Slurm cluster, as the wizard's "Slurm cluster" target sets them
// and the runs service submits them (placementOf: the same fields as `flotilla run --cluster`).
//
// Decision: these are not RunConfig keys (a config trains the same on any cluster); the wizard keeps
// them beside the config and both its Review page and the launch turn them into the runs layer's
// request with slurmStartRequest(), so the script the Review page shows is the one submitted.
#pragma once

#include <QString>

#include "engine/config/run_config.h"
#include "runs/placement.h"
#include "runs/slurm_run.h"

namespace flotilla::ui {

struct ClusterLaunch {
  QString cluster;            // a stored cluster's name
  QString partition;          // "": the cluster's default for Flotilla, else Slurm's
  int nodes = 1;              // the ranks (dp x tp x pp) are split evenly over them
  int gpusPerNode = 0;        // 0: a CPU job
  QString timeLimit = QStringLiteral("01:00:00");  // [D-]HH:MM:SS, finite
  int signalLeadSeconds = 300;                     // USR1 this long before the limit: checkpoint
  bool autoResume = false;    // requeue after that checkpoint (the job keeps its id)
};

// The runs layer's request for `config` named `name` (worker path and version are the launch's).
runs::SlurmStartRequest slurmStartRequest(const flotilla::RunConfig& config, const QString& name,
                                          const ClusterLaunch& launch);

// Where the runs service submits the run: the cluster and the job's shape.
runs::Placement placementOf(const ClusterLaunch& launch);

}  // namespace flotilla::ui
