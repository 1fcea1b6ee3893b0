// The Slurm launch choices as the runs layer's request (see clusterlaunch.h).
#include "ui/runs/clusterlaunch.h"

#include "flotilla/build_info.h"

namespace flotilla::ui {

runs::SlurmStartRequest slurmStartRequest(const flotilla::RunConfig& config, const QString& name,
                                          const ClusterLaunch& launch) {
  runs::SlurmStartRequest r;
  r.config = config;
  r.name = name.toStdString();
  r.nodes = launch.nodes;
  r.gpus_per_node = launch.gpusPerNode;
  r.time_limit = launch.timeLimit.toStdString();
  r.partition = launch.partition.toStdString();
  r.signal_lead_s = launch.signalLeadSeconds;
  r.auto_resume = launch.autoResume;
  r.version = FLOTILLA_VERSION_STRING;
  r.origin = "flotilla app";
  return r;
}

runs::Placement placementOf(const ClusterLaunch& launch) {
  runs::Placement p = runs::Placement::on_cluster(launch.cluster.toStdString());
  p.slurm_nodes = launch.nodes;
  p.gpus_per_node = launch.gpusPerNode;
  p.time_limit = launch.timeLimit.toStdString();
  p.partition = launch.partition.toStdString();
  p.signal_lead_s = launch.signalLeadSeconds;
  p.auto_resume = launch.autoResume;
  return p;
}

}  // namespace flotilla::ui
