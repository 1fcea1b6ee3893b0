// The New Run wizard's one piece of state: the RunConfig being edited, the hardware it targets and
// the ranks it will start, shared by every page (STYLE.md principles 9 and 10).
//
// Decision: pages never keep values of their own. Each edit goes through edit(), which changes the
// plain engine RunConfig and emits changed(); every page re-reads what it shows from here, and the
// Next button asks the engine's validate() (filtered to the page's field paths) whether the page
// is done. So the wizard's messages are the engine's, and what the wizard returns is exactly what
// the pages showed.
#pragma once

#include <QList>
#include <QObject>
#include <QString>
#include <QStringList>

#include <functional>
#include <optional>

#include "engine/config/config_validate.h"
#include "engine/config/run_config.h"
#include "engine/core/probe.h"
#include "engine/plan/calibration.h"
#include "engine/plan/planner.h"
#include "db/clusters.h"
#include "runs/plan_links.h"
#include "runs/slurm_run.h"
#include "ui/runs/clusterlaunch.h"

namespace flotilla::ui {

// Where the run trains: this machine's CPU, or its GPUs (all of one kind, as the probe lists them),
// or stored SSH nodes (one run over nodes.size() nodes x ranksPerNode ranks each), or a stored
// Slurm cluster (a batch job; its partition, nodes and GPUs per node are the draft's ClusterLaunch,
// and the device facts below follow the chosen partition).
struct HardwareTarget {
  enum class Kind { Cpu, Gpu, Nodes, Cluster };
  Kind kind = Kind::Cpu;
  QString label;          // "This machine's CPU (16 cores, 62.7 GiB)"
  QString deviceName;     // CPU model or GPU name ("" for nodes without a probed GPU)
  int maxRanks = 1;       // physical cores (CPU) or GPUs; nodes: nodes x ranksPerNode
  quint64 memBytes = 0;   // per GPU, or the whole machine's memory for the CPU; 0 = the data sheet's
  QStringList nodes;      // Nodes: the node names, the master first
  int ranksPerNode = 1;   // Nodes: a node's GPUs (1 for a node without GPUs)
  double usdPerHour = 0;  // Nodes: all of them together (0 = no price set)
  bool spot = false;      // Nodes: any of them is a spot (preemptible) node
  QString cluster;        // Cluster: the stored cluster's name
  int clusterNodes = 1;   // Cluster: nodes the job asks for
  int gpusPerNode = 0;    // Cluster: GPUs per node the job asks for (0: a CPU job)
  int cpusPerNode = 0;    // Cluster: the partition's CPUs per node (0: not probed)
};

// The targets a probe offers: the CPU first, then one entry for the GPUs when there are any.
QList<HardwareTarget> hardwareTargets(const flotilla::ProbeResult& probe);

// A stored SSH node as the wizard shows it (from db::SshNode; GPU type and count from its probe).
struct StoredNode {
  QString name, gpuType;
  int gpuCount = 0;
  double usdPerHour = 0;
  bool spot = false;
};
// One target per node, then "all N nodes" when there are several with the same GPU type and count
// (a run's ranks must be alike).
QList<HardwareTarget> nodeTargets(const QList<StoredNode>& nodes);

// A partition of a stored Slurm cluster as its last probe saw it, with its price.
struct ClusterPartitionInfo {
  QString name, state, maxTime, gpuType;
  bool isDefault = false;  // Slurm's default partition
  int nodes = 0;           // nodes in it
  int cpusPerNode = 0, gpusPerNode = 0;  // the smallest of its nodes
  quint64 memBytesPerNode = 0;
  std::optional<flotilla::db::PartitionPrice> price;
};
// A stored Slurm cluster as the wizard offers it: the store row (how to submit) and its partitions
// (empty: never probed; `flotilla clusters probe NAME`).
struct StoredCluster {
  flotilla::db::SlurmCluster record;
  QList<ClusterPartitionInfo> partitions;
  std::vector<flotilla::db::PartitionPrice> prices;  // also of partitions the probe did not list
};
// The store row, its probe (clusters.probe_json) and its prices as the wizard's cluster.
StoredCluster storedCluster(const flotilla::db::SlurmCluster& record,
                            const std::vector<flotilla::db::PartitionPrice>& prices);
// One target per stored cluster, after the node targets.
QList<HardwareTarget> clusterTargets(const QList<StoredCluster>& clusters);

// The planner's device for one rank of `target` when `ranks` ranks run: a GPU's data-sheet profile
// (memory from the probe), or the CPU's nominal profile with its cores and memory shared by the ranks.
flotilla::DeviceProfile deviceProfileFor(const HardwareTarget& target, const flotilla::RunConfig& config,
                                         int ranks);

// run.device for a target: "cuda" for GPUs (here, on nodes with a probed GPU, asked of a cluster), else "cpu".
std::string deviceOf(const HardwareTarget& target);

// Tokens per step when train.global_batch_tokens is 0 (no accumulation) for this layout.
qint64 naturalBatchTokens(const flotilla::RunConfig& config);

// After a change of the micro-batch, the sequence length or the layout (dp, pp, micro_batches), the
// global batch of `before` is kept. With preferredMicroBatch > 0 (a layout change) the micro-batch
// becomes the largest value up to it that cuts the batch evenly (dp 1 → 2 with no accumulation:
// micro-batch 8 → 4); otherwise, or when none does, train.global_batch_tokens is set to the batch
// when the new micro-batch × sequence × dp (× micro_batches with pp > 1) divides it, else to the
// nearest multiple of that. It is written as 0 when it is the natural batch. Returns what happened in
// words ("The global batch stays 16,384 tokens: accumulation 2 → 4"), empty when none of those
// fields changed. A batch is a training choice (it sets the optimisation); how it is cut into
// micro-batches and ranks is an execution choice that should not change the results.
QString keepGlobalBatch(const flotilla::RunConfig& before, flotilla::RunConfig& after, int preferredMicroBatch = 0);

class ConfigDraft : public QObject {
  Q_OBJECT

 public:
  explicit ConfigDraft(const flotilla::RunConfig& start, QObject* parent = nullptr);

  const flotilla::RunConfig& config() const { return m_config; }
  // Applies one change and emits changed() (pages call this from their widgets' edit signals).
  void edit(const std::function<void(flotilla::RunConfig&)>& change);
  // edit() that keeps the global batch across a change of micro-batch, sequence or layout
  // (keepGlobalBatch; a layout change may resize the micro-batch, up to the one last set on the
  // Batch page); its words are batchNote() until the next such change or replace().
  enum class BatchEdit { Batch, Layout };
  void editKeepingBatch(const std::function<void(flotilla::RunConfig&)>& change, BatchEdit kind);
  QString batchNote() const { return m_batchNote; }
  void clearBatchNote() { m_batchNote.clear(); }  // the user set the global batch itself
  // Replaces the whole config (a template, the Review page's TOML) and emits replaced() then changed().
  void replace(const flotilla::RunConfig& config);

  // The machine: targets come from the probe. Keeps the chosen kind when it is still offered.
  void setMachine(const flotilla::ProbeResult& probe);
  // The store's SSH nodes, offered after this machine's targets. Keeps a chosen node target when
  // it is still offered.
  void setNodes(const QList<StoredNode>& nodes);
  const QList<HardwareTarget>& targets() const { return m_targets; }
  int targetIndex() const { return m_target; }
  const HardwareTarget& target() const { return m_targets[m_target]; }
  // Also sets run.device; a node target also sets the ranks (nodes x ranks per node) and, when
  // tp x pp divides them, parallel.dp; a cluster target starts its launch on the partition's GPUs
  // per node (one node) and does the same for a GPU job.
  void setTargetIndex(int index);
  // The chosen target's node names ("" entries never): empty unless the run goes to SSH nodes.
  QStringList targetNodes() const {
    return target().kind == HardwareTarget::Kind::Nodes ? target().nodes : QStringList();
  }
  // Launch options for node targets (not RunConfig keys; the caller hands them to the launch):
  // recover automatically after a preemption (default: on when a chosen node is spot, until the
  // user sets it), and spare nodes to replace lost ones (stored nodes not chosen as targets).
  bool autoRecover() const { return m_autoRecover; }
  void setAutoRecover(bool on);
  QStringList spareNodes() const { return m_spares; }
  void setSpareNodes(const QStringList& names);  // names that are no candidates are dropped
  // The stored nodes that may serve as spares now (not among the target's nodes), store order.
  QStringList spareCandidates() const;
  const QList<StoredNode>& storedNodes() const { return m_storedNodes; }
  // The store's Slurm clusters, offered after the nodes. Keeps a chosen cluster while offered.
  void setClusters(const QList<StoredCluster>& clusters);
  const QList<StoredCluster>& storedClusters() const { return m_storedClusters; }
  // The chosen cluster (nullptr unless the target is one) and the partition the job goes to (the
  // launch's, else the cluster's default for Flotilla, else Slurm's; nullptr when not probed).
  const StoredCluster* targetCluster() const;
  const ClusterPartitionInfo* targetPartition() const;
  // The Slurm launch choices (not RunConfig keys; the caller hands them to the launch). Setting
  // them with GPUs per node > 0 sets run.device cuda and the ranks to nodes x GPUs per node (and
  // dp, when tp x pp divides them); a CPU job keeps the ranks, split evenly over the nodes.
  const ClusterLaunch& clusterLaunch() const { return m_clusterLaunch; }
  void setClusterLaunch(const ClusterLaunch& launch);
  // The batch script the cluster target would submit, its price and its refusals (runs layer).
  flotilla::runs::SlurmPreview slurmPreview() const;
  // Ranks (processes) the run starts: dp x tp x pp must equal it (validate's world size).
  int ranks() const { return m_ranks; }
  void setRanks(int ranks);

  // Every problem validate() finds, the layout against the ranks, and, once those fields are
  // valid, the worker's data preflight (the same code: shard headers, sizes, one batch per split).
  std::vector<flotilla::ConfigProblem> problems() const;
  // "path: message" lines of the problems whose path starts with one of the prefixes ("" = all).
  QStringList problemsUnder(const QStringList& prefixes) const;
  // The plan for the target; empty while the config is invalid. Its speed is calibratedPlan()'s.
  std::optional<flotilla::Plan> plan() const;
  // The plan with its speed calibrated (engine/plan/calibration.h): on this machine's CPU, the kept
  // peak (never measured here: "uncalibrated" without one), the kept link figures and the earlier
  // runs of setPlanHistory(); other targets use their data-sheet profile and the nominal efficiency.
  std::optional<flotilla::CalibratedPlan> calibratedPlan() const;
  // Earlier runs on this machine (runs::plan_history, read off the UI thread by the wizard).
  void setPlanHistory(std::vector<flotilla::RunObservation> history);
  // Links measured between stored nodes (runs::stored_links, read off the UI thread by the wizard):
  // a Nodes target plans over the slowest among its nodes (runs/plan_links.h).
  void setNodeLinks(std::vector<flotilla::runs::NamedLink> links);
  // What the plan's link is for a Nodes target ("link: measured a -> b at ...", or the pair never
  // measured); "" for other targets.
  QString planLinkLine() const;
  flotilla::DeviceProfile device() const { return deviceProfileFor(target(), m_config, m_ranks); }

 signals:
  void changed();
  void replaced();

 private:
  flotilla::RunConfig m_config;
  QString m_batchNote;
  int m_chosenMicroBatch = 0;  // the micro-batch last set on the Batch page (or by replace())
  std::vector<flotilla::ConfigProblem> preflight() const;
  mutable QString m_preflightKey;
  mutable std::vector<flotilla::ConfigProblem> m_preflightProblems;
  void rebuildTargets(const QList<HardwareTarget>& machine, const QList<HardwareTarget>& nodes,
                      const QList<HardwareTarget>& clusters);
  QList<HardwareTarget> m_targets;
  QList<HardwareTarget> m_machineTargets, m_nodeTargets, m_clusterTargets;
  // run.device for the target (and the launch's GPUs on a cluster).
  void applyDevice();
  // A cluster target: its facts from the chosen partition and launch, the ranks of a GPU job.
  void applyClusterLaunch();
  // dp = ranks / (tp x pp) when that divides, keeping the global batch (batchNote says how).
  void fitDpToRanks();
  // The Slurm refusals as problems on the wizard's fields (slurm.*, budget.max_usd, parallel).
  void addSlurmProblems(std::vector<flotilla::ConfigProblem>& out) const;
  QList<StoredCluster> m_storedClusters;
  ClusterLaunch m_clusterLaunch;
  // After the target changed: the default recovery choice and spares that are still candidates.
  void syncLaunchOptions();
  QList<StoredNode> m_storedNodes;
  bool m_autoRecover = false;
  bool m_autoRecoverChosen = false;  // the user set it: the spot default no longer applies
  QStringList m_spares;
  int m_target = 0;
  int m_ranks = 1;
  std::vector<flotilla::RunObservation> m_history;
  std::vector<flotilla::runs::NamedLink> m_links;
  // A Nodes target's measured link over `host` (the device profile's link); empty otherwise.
  flotilla::runs::MeasuredLinkResult nodeLink(const flotilla::LinkFigures& host) const;
};

}  // namespace flotilla::ui
