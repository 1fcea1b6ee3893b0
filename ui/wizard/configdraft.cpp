// The wizard's shared draft (see configdraft.h).
#include "ui/wizard/configdraft.h"

#include <QDateTime>
#include <QFileInfo>
#include <QLocale>
#include <QRegularExpression>

#include <algorithm>

#include "engine/data/loader.h"
#include "engine/train/data_preflight.h"
#include "runs/comm_efficiency.h"
#include "runs/node_admin.h"
#include "runs/node_ops.h"
#include "runs/run_setup.h"
#include "ui/nodes/machinefacts.h"

namespace flotilla::ui {
namespace {

// The data-sheet profile whose name the GPU's name carries, or "" when none does.
std::string gpuProfileName(const QString& gpuName) {
  const QString n = gpuName.toLower();
  if (n.contains(QStringLiteral("h200"))) return "h200";
  if (n.contains(QStringLiteral("h100"))) return "h100-sxm";
  if (n.contains(QStringLiteral("a100"))) return "a100-80gb";
  if (n.contains(QStringLiteral("4090"))) return "rtx-4090";
  if (n.contains(QRegularExpression(QStringLiteral("\\bl4\\b")))) return "l4";
  return {};
}

bool sameTarget(const HardwareTarget& a, const HardwareTarget& b) {
  return a.kind == b.kind && a.nodes == b.nodes && a.cluster == b.cluster;
}

}  // namespace

QList<HardwareTarget> hardwareTargets(const flotilla::ProbeResult& probe) {
  QList<HardwareTarget> out;
  HardwareTarget cpu;
  cpu.kind = HardwareTarget::Kind::Cpu;
  cpu.deviceName = QString::fromStdString(probe.cpu_model);
  cpu.maxRanks = std::max(1, probe.physical_cores);
  cpu.memBytes = probe.memory_total_bytes;
  cpu.label = ConfigDraft::tr("This machine's CPU (%1 cores, %2)")
                  .arg(cpu.maxRanks)
                  .arg(cpu.memBytes ? formatBytes(cpu.memBytes) : ConfigDraft::tr("memory unknown"));
  out.append(cpu);
  if (!probe.gpus.empty()) {
    HardwareTarget gpu;
    gpu.kind = HardwareTarget::Kind::Gpu;
    gpu.deviceName = QString::fromStdString(probe.gpus.front().name);
    gpu.maxRanks = static_cast<int>(probe.gpus.size());
    gpu.memBytes = probe.gpus.front().memory_total_bytes;
    for (const auto& g : probe.gpus) gpu.memBytes = std::min<quint64>(gpu.memBytes, g.memory_total_bytes);
    gpu.label = ConfigDraft::tr("This machine's GPUs (%1 × %2, %3 each)")
                    .arg(gpu.maxRanks)
                    .arg(gpu.deviceName, formatBytes(gpu.memBytes));
    out.append(gpu);
  }
  return out;
}

QList<HardwareTarget> nodeTargets(const QList<StoredNode>& nodes) {
  QList<HardwareTarget> out;
  const auto price = [](double usd, bool spot) {
    if (usd <= 0) return QString();
    return ConfigDraft::tr(", $%1/h%2").arg(usd, 0, 'f', 2).arg(spot ? ConfigDraft::tr(" spot") : QString());
  };
  const auto devices = [](const StoredNode& n) {
    return n.gpuCount > 0 ? ConfigDraft::tr("%1 × %2").arg(n.gpuCount).arg(n.gpuType)
                          : ConfigDraft::tr("no GPU probed: 1 CPU rank");
  };
  for (const StoredNode& n : nodes) {
    HardwareTarget t;
    t.kind = HardwareTarget::Kind::Nodes;
    t.deviceName = n.gpuCount > 0 ? n.gpuType : QString();
    t.ranksPerNode = std::max(1, n.gpuCount);
    t.maxRanks = t.ranksPerNode;
    t.nodes = {n.name};
    t.usdPerHour = n.usdPerHour;
    t.spot = n.spot;
    t.label = ConfigDraft::tr("Node %1 (%2%3)").arg(n.name, devices(n), price(n.usdPerHour, n.spot));
    out.append(t);
  }
  // Alike nodes together: one run over all of them.
  QList<int> done;
  for (int i = 0; i < nodes.size(); ++i) {
    if (done.contains(i)) continue;
    HardwareTarget t = out[i];
    bool anySpot = nodes[i].spot;
    for (int j = i + 1; j < nodes.size(); ++j)
      if (nodes[j].gpuType == nodes[i].gpuType && nodes[j].gpuCount == nodes[i].gpuCount) {
        done.append(j);
        t.nodes.append(nodes[j].name);
        t.usdPerHour += nodes[j].usdPerHour;
        anySpot = anySpot || nodes[j].spot;
      }
    if (t.nodes.size() < 2) continue;
    t.spot = anySpot;
    t.maxRanks = static_cast<int>(t.nodes.size()) * t.ranksPerNode;
    t.label = ConfigDraft::tr("Nodes %1 (%2 × %3%4)")
                  .arg(t.nodes.join(QStringLiteral(", ")))
                  .arg(t.nodes.size())
                  .arg(devices(nodes[i]), price(t.usdPerHour, anySpot));
    out.append(t);
  }
  return out;
}

StoredCluster storedCluster(const flotilla::db::SlurmCluster& record,
                            const std::vector<flotilla::db::PartitionPrice>& prices) {
  StoredCluster c;
  c.record = record;
  c.prices = prices;
  if (record.probe_json.empty()) return c;
  const runs::ClusterProbe probe = runs::cluster_probe_from_json(record.probe_json);
  for (const runs::SlurmPartition& part : probe.partitions) {
    ClusterPartitionInfo info;
    info.name = QString::fromStdString(part.name);
    info.state = QString::fromStdString(part.state);
    info.maxTime = QString::fromStdString(part.max_time);
    info.isDefault = part.is_default;
    for (const runs::SlurmNode& n : probe.nodes) {
      if (std::find(n.partitions.begin(), n.partitions.end(), part.name) == n.partitions.end()) continue;
      const bool first = info.nodes++ == 0;
      const quint64 mem = static_cast<quint64>(std::max<int64_t>(0, n.memory_mb)) << 20;
      info.cpusPerNode = first ? n.cpus : std::min(info.cpusPerNode, n.cpus);
      info.gpusPerNode = first ? n.gpus : std::min(info.gpusPerNode, n.gpus);
      info.memBytesPerNode = first ? mem : std::min(info.memBytesPerNode, mem);
      if (info.gpuType.isEmpty()) info.gpuType = QString::fromStdString(n.gpu_type);
    }
    if (info.nodes == 0) info.nodes = part.total_nodes;
    for (const auto& pr : prices)
      if (pr.partition == part.name) info.price = pr;
    c.partitions.append(info);
  }
  return c;
}

QList<HardwareTarget> clusterTargets(const QList<StoredCluster>& clusters) {
  QList<HardwareTarget> out;
  for (const StoredCluster& c : clusters) {
    HardwareTarget t;
    t.kind = HardwareTarget::Kind::Cluster;
    t.cluster = QString::fromStdString(c.record.name);
    t.maxRanks = 4096;
    if (c.partitions.isEmpty()) {
      t.label = ConfigDraft::tr("Slurm cluster %1 (not probed yet: flotilla clusters probe %1)").arg(t.cluster);
    } else {
      int gpus = 0;
      for (const ClusterPartitionInfo& p : c.partitions) gpus = std::max(gpus, p.gpusPerNode);
      const runs::ClusterProbe probe = runs::cluster_probe_from_json(c.record.probe_json);
      t.label = ConfigDraft::tr("Slurm cluster %1 (%n partition(s), %2 node(s)%3)", nullptr,
                                static_cast<int>(c.partitions.size()))
                    .arg(t.cluster)
                    .arg(probe.nodes.size())
                    .arg(gpus > 0 ? ConfigDraft::tr(", up to %1 GPU(s) per node").arg(gpus) : QString());
    }
    out.append(t);
  }
  return out;
}

flotilla::DeviceProfile deviceProfileFor(const HardwareTarget& target, const flotilla::RunConfig& config,
                                         int ranks) {
  ranks = std::max(1, ranks);
  flotilla::DeviceProfile p;
  if (target.kind == HardwareTarget::Kind::Cluster && target.gpusPerNode == 0) {
    // A CPU job: the ranks on a node share its CPUs and memory (a nominal CPU: never measured here).
    const int perNode = std::max(1, ranks / std::max(1, target.clusterNodes));
    const int threads = config.run.threads > 0 ? config.run.threads
                        : target.cpusPerNode > 0 ? std::max(1, target.cpusPerNode / perNode)
                                                 : 4;
    p = flotilla::cpu_profile_nominal(threads);
    if (target.memBytes) p.mem_bytes = target.memBytes / static_cast<quint64>(perNode);
    return p;
  }
  if (target.kind == HardwareTarget::Kind::Nodes && target.deviceName.isEmpty()) {
    // A node without a probed GPU: one CPU rank per node, planned with a nominal CPU.
    p = flotilla::cpu_profile_nominal(config.run.threads > 0 ? config.run.threads : 4);
    if (target.memBytes) p.mem_bytes = target.memBytes;
    return p;
  }
  if (target.kind != HardwareTarget::Kind::Cpu) {  // GPUs here or on nodes: by the GPU's name
    const std::string known = gpuProfileName(target.deviceName);
    // An unknown GPU is planned with an A100's speed; its memory is always the probed one.
    if (!flotilla::find_gpu_profile(known.empty() ? "a100-80gb" : known, config.train.dtype, &p))
      flotilla::find_gpu_profile("a100-80gb", "fp32", &p);
    if (known.empty())
      p.name = (target.deviceName.isEmpty() ? std::string("untyped GPU") : target.deviceName.toStdString()) +
               " (unknown GPU: planned at A100 speed)";
    if (target.memBytes) p.mem_bytes = target.memBytes;
    return p;
  }
  // CPU ranks share the cores and the memory of the machine.
  const int threads = config.run.threads > 0 ? config.run.threads : std::max(1, target.maxRanks / ranks);
  p = flotilla::cpu_profile_nominal(threads);
  if (target.memBytes) p.mem_bytes = target.memBytes;
  p.mem_bytes /= static_cast<quint64>(ranks);
  return p;
}

qint64 naturalBatchTokens(const flotilla::RunConfig& config) {
  flotilla::RunConfig c = config;
  c.train.global_batch_tokens = 0;
  return flotilla::tokens_per_step(c);
}

ConfigDraft::ConfigDraft(const flotilla::RunConfig& start, QObject* parent)
    : QObject(parent), m_config(start) {
  flotilla::ProbeResult none;
  m_targets = m_machineTargets = hardwareTargets(none);
  m_ranks = std::max(1, start.parallel.dp * start.parallel.tp * start.parallel.pp);
  m_chosenMicroBatch = start.train.micro_batch;
}

void ConfigDraft::edit(const std::function<void(flotilla::RunConfig&)>& change) {
  change(m_config);
  emit changed();
}

void ConfigDraft::editKeepingBatch(const std::function<void(flotilla::RunConfig&)>& change, BatchEdit kind) {
  const flotilla::RunConfig before = m_config;
  change(m_config);
  if (kind == BatchEdit::Batch && m_config.train.micro_batch != before.train.micro_batch)
    m_chosenMicroBatch = m_config.train.micro_batch;
  const QString note =
      keepGlobalBatch(before, m_config, kind == BatchEdit::Layout ? std::max(1, m_chosenMicroBatch) : 0);
  if (!note.isEmpty()) m_batchNote = note;
  emit changed();
}

QString keepGlobalBatch(const flotilla::RunConfig& before, flotilla::RunConfig& after, int preferredMicroBatch) {
  const auto& b = before;
  auto& a = after;
  const bool moved = b.train.micro_batch != a.train.micro_batch || b.train.seq_len != a.train.seq_len ||
                     b.parallel.dp != a.parallel.dp || b.parallel.pp != a.parallel.pp ||
                     (a.parallel.pp > 1 && b.parallel.micro_batches != a.parallel.micro_batches);
  if (!moved) return {};
  const qint64 tokens = flotilla::tokens_per_step(b);
  // An edit through zero (a cleared field) or a batch that was not one: nothing to keep.
  if (tokens <= 0 || naturalBatchTokens(a) <= 0 || b.train.micro_batch <= 0 || b.train.seq_len <= 0 ||
      b.parallel.dp <= 0)
    return {};
  const qint64 accumBefore = flotilla::grad_accum_steps(b);
  const QLocale locale;
  const QString was = locale.toString(tokens);
  QString micro;
  if (preferredMicroBatch > 0) {
    flotilla::RunConfig trial = a;
    for (int m = preferredMicroBatch; m >= 1; --m) {
      trial.train.micro_batch = m;
      if (tokens % naturalBatchTokens(trial) == 0) {
        if (m != a.train.micro_batch)
          micro = ConfigDraft::tr("micro-batch %1 → %2, ").arg(b.train.micro_batch).arg(m);
        a.train.micro_batch = m;
        break;
      }
    }
  }
  const qint64 unit = naturalBatchTokens(a);  // micro-batch x sequence x dp (x micro_batches with pp)
  qint64 kept = tokens;
  if (tokens % unit != 0) kept = std::max<qint64>(1, (tokens + unit / 2) / unit) * unit;
  a.train.global_batch_tokens = kept == unit ? 0 : kept;
  const qint64 accumAfter = flotilla::grad_accum_steps(a);
  if (kept != tokens)
    return ConfigDraft::tr("The global batch moved from %1 to %2 tokens, the nearest multiple of micro-batch × "
                           "sequence × data ranks%3 = %4; accumulation %5 → %6.")
        .arg(was, locale.toString(kept), a.parallel.pp > 1 ? ConfigDraft::tr(" × micro-batches") : QString(),
             locale.toString(unit))
        .arg(accumBefore)
        .arg(accumAfter);
  return ConfigDraft::tr("The global batch stays %1 tokens: %2accumulation %3 → %4.")
      .arg(was, micro)
      .arg(accumBefore)
      .arg(accumAfter);
}

void ConfigDraft::replace(const flotilla::RunConfig& config) {
  m_config = config;
  m_batchNote.clear();
  m_chosenMicroBatch = config.train.micro_batch;
  m_ranks = std::max(1, config.parallel.dp * config.parallel.tp * config.parallel.pp);
  const bool wantsGpu = config.run.device == "cuda";
  if (target().kind != HardwareTarget::Kind::Nodes &&
      target().kind != HardwareTarget::Kind::Cluster)  // chosen nodes or a cluster stay chosen
    for (int i = 0; i < m_machineTargets.size(); ++i)
      if ((m_targets[i].kind == HardwareTarget::Kind::Gpu) == wantsGpu) m_target = i;
  emit replaced();
  emit changed();
}

void ConfigDraft::rebuildTargets(const QList<HardwareTarget>& machine, const QList<HardwareTarget>& nodes,
                                 const QList<HardwareTarget>& clusters) {
  const HardwareTarget was = target();
  m_machineTargets = machine;
  m_nodeTargets = nodes;
  m_clusterTargets = clusters;
  m_targets = machine + nodes + clusters;
  m_target = 0;
  for (int i = 0; i < m_targets.size(); ++i)
    if (sameTarget(m_targets[i], was)) m_target = i;
  if (target().kind != was.kind) {  // the chosen nodes or cluster are gone: back to this machine
    for (int i = 0; i < m_machineTargets.size(); ++i)
      if (m_targets[i].kind == HardwareTarget::Kind::Cpu) m_target = i;
  }
  applyClusterLaunch();
}

// GPUs here, on the nodes or asked of the cluster run on CUDA.
std::string deviceOf(const HardwareTarget& t) {
  const bool gpu = t.kind == HardwareTarget::Kind::Gpu ||
                   (t.kind == HardwareTarget::Kind::Nodes && !t.deviceName.isEmpty()) ||
                   (t.kind == HardwareTarget::Kind::Cluster && t.gpusPerNode > 0);
  return gpu ? "cuda" : "cpu";
}

void ConfigDraft::applyDevice() { m_config.run.device = deviceOf(target()); }

void ConfigDraft::setMachine(const flotilla::ProbeResult& probe) {
  rebuildTargets(hardwareTargets(probe), m_nodeTargets, m_clusterTargets);
  applyDevice();
  syncLaunchOptions();
  emit changed();
}

void ConfigDraft::setNodes(const QList<StoredNode>& nodes) {
  m_storedNodes = nodes;
  rebuildTargets(m_machineTargets, nodeTargets(nodes), m_clusterTargets);
  applyDevice();
  syncLaunchOptions();
  emit changed();
}

void ConfigDraft::setClusters(const QList<StoredCluster>& clusters) {
  m_storedClusters = clusters;
  rebuildTargets(m_machineTargets, m_nodeTargets, clusterTargets(clusters));
  applyDevice();
  syncLaunchOptions();
  emit changed();
}

const StoredCluster* ConfigDraft::targetCluster() const {
  if (target().kind != HardwareTarget::Kind::Cluster) return nullptr;
  for (const StoredCluster& c : m_storedClusters)
    if (QString::fromStdString(c.record.name) == target().cluster) return &c;
  return nullptr;
}

namespace {
// The partition a job of `launch` goes to: the launch's, else the cluster's default for Flotilla
// ("": Slurm's own default, named by the probe when it ran).
QString effectivePartition(const StoredCluster& c, const ClusterLaunch& launch) {
  if (!launch.partition.isEmpty()) return launch.partition;
  return QString::fromStdString(c.record.partition);
}
}  // namespace

const ClusterPartitionInfo* ConfigDraft::targetPartition() const {
  const StoredCluster* c = targetCluster();
  if (!c) return nullptr;
  const QString name = effectivePartition(*c, m_clusterLaunch);
  for (const ClusterPartitionInfo& p : c->partitions)
    if (name.isEmpty() ? p.isDefault : p.name == name) return &p;
  return nullptr;
}

void ConfigDraft::fitDpToRanks() {
  const int split = std::max(1, m_config.parallel.tp) * std::max(1, m_config.parallel.pp);
  if (m_ranks % split != 0) return;  // the layout problem says what to change
  const flotilla::RunConfig before = m_config;
  m_config.parallel.dp = m_ranks / split;
  const QString note = keepGlobalBatch(before, m_config, std::max(1, m_chosenMicroBatch));
  if (!note.isEmpty()) m_batchNote = note;
}

void ConfigDraft::applyClusterLaunch() {
  if (target().kind != HardwareTarget::Kind::Cluster) return;
  HardwareTarget& t = m_targets[m_target];
  const ClusterPartitionInfo* part = targetPartition();
  t.clusterNodes = std::max(1, m_clusterLaunch.nodes);
  t.gpusPerNode = std::max(0, m_clusterLaunch.gpusPerNode);
  t.cpusPerNode = part ? part->cpusPerNode : 0;
  t.deviceName = t.gpusPerNode > 0 ? (part ? part->gpuType : QString()) : QString();
  t.memBytes = t.gpusPerNode > 0 || !part ? 0 : part->memBytesPerNode;
  t.ranksPerNode = t.gpusPerNode > 0 ? t.gpusPerNode : std::max(1, t.cpusPerNode);
  t.maxRanks = t.gpusPerNode > 0 || t.cpusPerNode > 0 ? t.clusterNodes * t.ranksPerNode : 4096;
  t.usdPerHour = slurmPreview().price.usd_per_hour;
}

void ConfigDraft::setClusterLaunch(const ClusterLaunch& launch) {
  m_clusterLaunch = launch;
  if (target().kind == HardwareTarget::Kind::Cluster) {
    m_clusterLaunch.cluster = target().cluster;
    applyClusterLaunch();
    applyDevice();
    if (m_clusterLaunch.gpusPerNode > 0) {  // one rank per GPU
      m_ranks = std::max(1, m_clusterLaunch.nodes) * m_clusterLaunch.gpusPerNode;
      fitDpToRanks();
    }
  }
  emit changed();
}

flotilla::runs::SlurmPreview ConfigDraft::slurmPreview() const {
  const StoredCluster* c = targetCluster();
  if (!c) return {};
  const std::string partition = effectivePartition(*c, m_clusterLaunch).toStdString();
  std::optional<flotilla::db::PartitionPrice> price;
  for (const auto& p : c->prices)
    if (p.partition == partition) price = p;
  return flotilla::runs::preview_slurm_script(
      c->record, slurmStartRequest(m_config, QString::fromStdString(m_config.run.name), m_clusterLaunch), price);
}

void ConfigDraft::addSlurmProblems(std::vector<flotilla::ConfigProblem>& out) const {
  if (!targetCluster()) return;
  const auto& par = m_config.parallel;
  const int world = std::max(1, par.dp * par.tp * par.pp);
  const int nodes = std::max(1, m_clusterLaunch.nodes);
  if (world % nodes != 0)
    out.push_back({"slurm.nodes", tr("%1 rank(s) cannot be split evenly over %2 node(s): choose a node count "
                                     "that divides them, or change the ranks")
                                      .arg(world)
                                      .arg(nodes)
                                      .toStdString()});
  if (const ClusterPartitionInfo* part = targetPartition()) {
    if (m_clusterLaunch.gpusPerNode > part->gpusPerNode)
      out.push_back({"slurm.gpus", tr("partition %1 has %n GPU(s) per node: ask for at most that many", nullptr,
                                      part->gpusPerNode)
                                       .arg(part->name)
                                       .toStdString()});
    if (part->nodes > 0 && nodes > part->nodes)
      out.push_back({"slurm.nodes", tr("partition %1 has %n node(s): the job would wait for ever", nullptr,
                                       part->nodes)
                                        .arg(part->name)
                                        .toStdString()});
  }
  for (const std::string& p : slurmPreview().problems) {
    if (p.rfind("parallel.", 0) == 0) continue;  // the split over the nodes, said above in the wizard's words
    const auto starts = [&p](const char* word) { return p.rfind(word, 0) == 0; };
    const char* path = starts("partition")       ? "slurm.partition"
                       : starts("time limit")    ? "slurm.time"
                       : starts("nodes")         ? "slurm.nodes"
                       : starts("gpus per node") ? "slurm.gpus"
                       : starts("signal lead")   ? "slurm.lead"
                       : starts("the run has a budget") ? "budget.max_usd"
                                                        : "slurm";
    out.push_back({path, p});
  }
}

void ConfigDraft::syncLaunchOptions() {
  if (!m_autoRecoverChosen) m_autoRecover = target().kind == HardwareTarget::Kind::Nodes && target().spot;
  const QStringList candidates = spareCandidates();
  QStringList kept;
  for (const QString& s : std::as_const(m_spares))
    if (candidates.contains(s)) kept << s;
  m_spares = kept;
}

void ConfigDraft::setAutoRecover(bool on) {
  m_autoRecoverChosen = true;
  m_autoRecover = on;
  emit changed();
}

void ConfigDraft::setSpareNodes(const QStringList& names) {
  const QStringList candidates = spareCandidates();
  m_spares.clear();
  for (const QString& c : candidates)  // in store order, once each
    if (names.contains(c)) m_spares << c;
  emit changed();
}

QStringList ConfigDraft::spareCandidates() const {
  QStringList out;
  const QStringList chosen = targetNodes();
  for (const StoredNode& n : m_storedNodes)
    if (!chosen.contains(n.name)) out << n.name;
  return out;
}

void ConfigDraft::setTargetIndex(int index) {
  if (index < 0 || index >= m_targets.size()) return;
  m_target = index;
  if (target().kind == HardwareTarget::Kind::Cluster && m_clusterLaunch.cluster != target().cluster) {
    // A new cluster: one node of its partition with all its GPUs (the user's time limit, lead and
    // auto-resume stay as they were chosen).
    m_clusterLaunch.cluster = target().cluster;
    m_clusterLaunch.partition.clear();
    m_clusterLaunch.nodes = 1;
    const ClusterPartitionInfo* part = targetPartition();
    m_clusterLaunch.gpusPerNode = part ? part->gpusPerNode : 0;
  }
  applyClusterLaunch();
  applyDevice();
  if (target().kind == HardwareTarget::Kind::Nodes ||
      (target().kind == HardwareTarget::Kind::Cluster && m_clusterLaunch.gpusPerNode > 0)) {
    m_ranks = target().kind == HardwareTarget::Kind::Nodes ? target().maxRanks
                                                           : m_clusterLaunch.nodes * m_clusterLaunch.gpusPerNode;
    fitDpToRanks();
  }
  syncLaunchOptions();
  emit changed();
}

void ConfigDraft::setRanks(int ranks) {
  m_ranks = std::max(1, ranks);
  emit changed();
}

std::vector<flotilla::ConfigProblem> ConfigDraft::problems() const {
  // The layout against the ranks is the wizard's own check: its fix is a field of this form, not
  // the worker's command line the engine's message names.
  std::vector<flotilla::ConfigProblem> out = flotilla::validate(m_config, 0);
  const auto& par = m_config.parallel;
  if (par.dp >= 1 && par.tp >= 1 && par.pp >= 1) {
    const qint64 layout = qint64{par.dp} * par.tp * par.pp;
    if (layout != m_ranks)
      out.push_back(
          {"parallel", tr("dp × tp × pp = %1 × %2 × %3 = %4 ranks, but Ranks is %5: set Ranks to %4, "
                          "or change dp, tp or pp so that they multiply to %5")
                           .arg(par.dp)
                           .arg(par.tp)
                           .arg(par.pp)
                           .arg(layout)
                           .arg(m_ranks)
                           .toStdString()});
  }
  // The runs layer's rule for a new run's name is stricter than the worker's run.name check (no
  // leading '-' or '_', at most 64 characters): shown here rather than only when the run starts.
  const bool name_ok = std::none_of(out.begin(), out.end(),
                                    [](const flotilla::ConfigProblem& p) { return p.path == "run.name"; });
  if (const std::string p = flotilla::runs::new_run_name_problem(m_config.run.name); name_ok && !p.empty())
    out.push_back({"run.name", p});
  addSlurmProblems(out);
  // The worker's data preflight, the same code (engine/train/data_preflight.h), once the fields it
  // reads are valid; cached on those fields and the shards' sizes and times.
  const bool ready = std::none_of(out.begin(), out.end(), [](const flotilla::ConfigProblem& p) {
    return p.path.rfind("data", 0) == 0 || p.path.rfind("train", 0) == 0 ||
           p.path.rfind("parallel", 0) == 0 || p.path == "model.vocab_size";
  });
  if (ready) {
    const std::vector<flotilla::ConfigProblem> data = preflight();
    out.insert(out.end(), data.begin(), data.end());
  }
  return out;
}

std::vector<flotilla::ConfigProblem> ConfigDraft::preflight() const {
  const auto& c = m_config;
  if (c.data.source == "synthetic") return {};
  QStringList key{QString::fromStdString(c.data.train), QString::fromStdString(c.data.val),
                  QString::number(c.train.micro_batch), QString::number(c.train.seq_len),
                  QString::number(c.parallel.dp),       QString::number(c.model.vocab_size),
                  QString::number(c.data.checked),      QString::number(c.data.shuffle)};
  for (const std::string& pattern : {c.data.train, c.data.val}) {
    if (pattern.empty()) continue;
    try {
      for (const std::string& path : flotilla::expand_shards(pattern)) {
        const QFileInfo info(QString::fromStdString(path));
        key << info.filePath() << QString::number(info.size())
            << QString::number(info.lastModified().toMSecsSinceEpoch());
      }
    } catch (const std::exception&) {
      key << QStringLiteral("(none)");
    }
  }
  const QString joined = key.join(QChar(0x1f));
  if (joined != m_preflightKey) {
    m_preflightKey = joined;
    m_preflightProblems = flotilla::preflight_data(c);
  }
  return m_preflightProblems;
}

QStringList ConfigDraft::problemsUnder(const QStringList& prefixes) const {
  QStringList out;
  for (const auto& p : problems()) {
    const QString path = QString::fromStdString(p.path);
    const bool match = std::any_of(prefixes.begin(), prefixes.end(), [&](const QString& prefix) {
      return prefix.isEmpty() || path == prefix || path.startsWith(prefix + QLatin1Char('.'));
    });
    if (match) out << QString::fromStdString(flotilla::to_string(p));
  }
  return out;
}

std::optional<flotilla::Plan> ConfigDraft::plan() const {
  const std::optional<flotilla::CalibratedPlan> calibrated = calibratedPlan();
  if (!calibrated) return std::nullopt;
  return calibrated->plan;
}

std::optional<flotilla::CalibratedPlan> ConfigDraft::calibratedPlan() const {
  if (!problems().empty()) return std::nullopt;
  flotilla::Calibration calibration;
  if (target().kind == HardwareTarget::Kind::Cpu) {
    calibration = flotilla::machine_calibration(m_config, false);  // reads the kept figures only
    calibration.history = m_history;
  } else if (target().kind == HardwareTarget::Kind::Nodes) {
    const flotilla::DeviceProfile d = device();
    const auto measured = nodeLink({d.link_bytes_per_s, d.link_latency_s, ""});
    if (measured.link) calibration.link = *measured.link;
  }
  return flotilla::plan_calibrated(m_config, device(), calibration);
}

flotilla::runs::MeasuredLinkResult ConfigDraft::nodeLink(const flotilla::LinkFigures& host) const {
  if (target().kind != HardwareTarget::Kind::Nodes) return {};
  std::vector<std::string> names;
  for (const QString& n : target().nodes) names.push_back(n.toStdString());
  return flotilla::runs::slowest_link_among(m_links, names, host);
}

void ConfigDraft::setNodeLinks(std::vector<flotilla::runs::NamedLink> links) {
  m_links = std::move(links);
  emit changed();
}

QString ConfigDraft::planLinkLine() const {
  if (target().kind != HardwareTarget::Kind::Nodes || target().nodes.size() < 2) return {};
  const flotilla::DeviceProfile d = device();
  const auto m = nodeLink({d.link_bytes_per_s, d.link_latency_s, ""});
  if (!m.link)
    return tr("link: %1; planned with the device profile's link").arg(QString::fromStdString(m.note));
  return tr("link: %1: %2, planned at %3")
      .arg(QString::fromStdString(m.link->source),
           QString::fromStdString(flotilla::runs::rate_text(m.bytes_per_s)),
           QString::fromStdString(flotilla::runs::rate_text(m.link->bytes_per_s)));
}

void ConfigDraft::setPlanHistory(std::vector<flotilla::RunObservation> history) {
  m_history = std::move(history);
  emit changed();
}

}  // namespace flotilla::ui
