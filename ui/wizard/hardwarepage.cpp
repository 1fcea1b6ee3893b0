// Hardware & parallelism page (see hardwarepage.h).
#include "ui/wizard/hardwarepage.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QLocale>
#include <QPushButton>
#include <QSpinBox>
#include <QTimer>
#include <QtConcurrent/QtConcurrentRun>

#include "ui/nodes/machinefacts.h"
#include "ui/wizard/configdraft.h"
#include "ui/wizard/memorybar.h"
#include "ui/wizard/wizardformat.h"

namespace flotilla::ui {

HardwarePage::HardwarePage(ConfigDraft* configDraft, QWidget* parent)
    : WizardPageBase(configDraft,
                     {QStringLiteral("parallel"), QStringLiteral("run.device"), QStringLiteral("run.threads"),
                      QStringLiteral("train.dtype"), QStringLiteral("train.recompute"), QStringLiteral("slurm")},
                     parent),
      m_target(new QComboBox(this)),
      m_autoRecover(new QCheckBox(tr("Recover automatically after a preemption"), this)),
      m_spares(new QListWidget(this)),
      m_slurmPartition(new QComboBox(this)),
      m_slurmNodes(new QSpinBox(this)),
      m_slurmGpus(new QSpinBox(this)),
      m_slurmTime(new QLineEdit(this)),
      m_slurmLead(new QSpinBox(this)),
      m_slurmAutoResume(new QCheckBox(tr("Requeue after the time-limit checkpoint and resume from it"), this)),
      m_slurmFacts(new QLabel(this)),
      m_ranks(new QSpinBox(this)),
      m_dp(new QSpinBox(this)),
      m_tp(new QSpinBox(this)),
      m_pp(new QSpinBox(this)),
      m_zero(new QSpinBox(this)),
      m_microBatches(new QSpinBox(this)),
      m_schedule(new QComboBox(this)),
      m_dtype(new QComboBox(this)),
      m_recompute(new QCheckBox(
          tr("Recompute activations in backward (less memory, more compute: the planner shows both)"), this)),
      m_memory(new MemoryBar(this)),
      m_breakdown(new QLabel(this)),
      m_batchNote(new QLabel(this)),
      m_plan(new QLabel(this)),
      m_advice(new QLabel(this)),
      m_recommend(new QPushButton(tr("Recommend"), this)),
      m_searchDelay(new QTimer(this)) {
  setTitle(tr("Hardware & parallelism"));
  setSubTitle(
      tr("Where the run trains and how the work is split. The planner predicts memory per device and "
         "the time per step before anything starts."));
  const struct {
    QSpinBox* box;
    const char* name;
    int min, max;
  } spins[] = {{m_ranks, "ranks", 0, 4096}, {m_dp, "dp", 0, 4096},
               {m_tp, "tp", 0, 64},         {m_pp, "pp", 0, 256},
               {m_zero, "zero", 0, 3},      {m_microBatches, "microBatches", 0, 1024}};
  for (const auto& s : spins) {
    s.box->setObjectName(QLatin1String(s.name));
    s.box->setRange(s.min, s.max);
  }
  m_target->setObjectName(QStringLiteral("target"));
  m_autoRecover->setObjectName(QStringLiteral("autoRecover"));
  m_autoRecover->setToolTip(tr(
      "When a node is preempted (a spot node taken back), resume the run from its newest checkpoint on "
      "the nodes that remain, or on a spare node, without asking. At most 3 times per run. Each checkpoint "
      "is also copied to this machine as it is written, so even losing the master node is recoverable."));
  m_spares->setObjectName(QStringLiteral("spareNodes"));
  m_spares->setToolTip(
      tr("Optional: stored nodes that replace a lost node, in this order. Without a spare, "
         "the lost node's ranks move to the nodes that remain."));
  m_spares->setMaximumHeight(m_spares->fontMetrics().height() * 4 + 8);
  m_slurmPartition->setObjectName(QStringLiteral("slurmPartition"));
  m_slurmPartition->setEditable(true);  // a partition the probe did not list may still be named
  m_slurmPartition->setToolTip(
      tr("The Slurm partition (queue) the job goes to; empty: the cluster's default. Its nodes, GPUs and "
         "price come from the cluster's last probe (Clusters page) and `flotilla clusters price`."));
  m_slurmNodes->setObjectName(QStringLiteral("slurmNodes"));
  m_slurmNodes->setRange(1, 4096);
  m_slurmNodes->setToolTip(tr("Nodes the job asks for; the ranks are split evenly over them (#SBATCH --nodes)."));
  m_slurmGpus->setObjectName(QStringLiteral("slurmGpus"));
  m_slurmGpus->setRange(0, 64);
  m_slurmGpus->setSpecialValueText(tr("none (a CPU job)"));
  m_slurmGpus->setToolTip(
      tr("GPUs per node (#SBATCH --gpus-per-node), one rank each: the ranks become nodes × GPUs. 0 runs "
         "a CPU job whose ranks share each node's CPUs."));
  m_slurmTime->setObjectName(QStringLiteral("slurmTime"));
  m_slurmTime->setPlaceholderText(QStringLiteral("HH:MM:SS"));
  m_slurmTime->setToolTip(
      tr("The job's time limit, [D-]HH:MM:SS (#SBATCH --time). Slurm ends the job then: the run "
         "checkpoints before it (the lead below) and, with auto-resume, continues in a requeued job."));
  m_slurmLead->setObjectName(QStringLiteral("slurmLead"));
  m_slurmLead->setRange(0, 86400);
  m_slurmLead->setSuffix(tr(" s before the limit"));
  m_slurmLead->setToolTip(
      tr("Slurm sends the batch script USR1 this long before the time limit (#SBATCH --signal=B:USR1@N); "
         "the run checkpoints then. Leave time for one step and the checkpoint write."));
  m_slurmAutoResume->setObjectName(QStringLiteral("slurmAutoResume"));
  m_slurmAutoResume->setToolTip(
      tr("After the time-limit checkpoint the job requeues itself (#SBATCH --requeue, same job id) and "
         "resumes from that checkpoint when Slurm runs it again. Without it the run ends as stopped."));
  m_slurmFacts->setObjectName(QStringLiteral("slurmFacts"));
  m_slurmFacts->setWordWrap(true);
  m_schedule->setObjectName(QStringLiteral("pipelineSchedule"));
  m_dtype->setObjectName(QStringLiteral("dtype"));
  m_recompute->setObjectName(QStringLiteral("recompute"));
  m_memory->setObjectName(QStringLiteral("memoryBar"));
  m_plan->setObjectName(QStringLiteral("planText"));
  m_batchNote->setObjectName(QStringLiteral("batchNote"));
  m_batchNote->setWordWrap(true);
  m_advice->setObjectName(QStringLiteral("recommendation"));
  m_recommend->setObjectName(QStringLiteral("recommendButton"));
  m_recommend->setToolTip(
      tr("Fill in the fastest layout the planner finds that fits the devices' memory "
         "(the global batch stays as it is)"));
  // Every field says what it does and what it costs (a torchrun user knows the words, not our keys).
  m_target->setToolTip(
      tr("Where the ranks run: this machine's CPU cores, its GPUs (one process per GPU), or stored SSH "
         "nodes (Nodes page). The planner's memory and speed use that hardware."));
  m_ranks->setToolTip(
      tr("Processes the run starts, one per GPU (or a share of the CPU cores each). It is data × tensor "
         "× pipeline; on this machine it follows those three."));
  m_dp->setToolTip(
      tr("Data parallel: each rank holds a whole copy of the model (or its ZeRO share) and trains on "
         "its own part of the batch; gradients are averaged with an all-reduce every step. The "
         "global batch stays the same: accumulation adjusts."));
  m_tp->setToolTip(
      tr("Tensor parallel: each layer's matrices are split across this many ranks, which exchange "
         "activations twice per layer. Cuts weight and activation memory; needs fast links (one "
         "machine). Must divide the heads and the FFN width."));
  m_pp->setToolTip(
      tr("Pipeline parallel: the layers are cut into this many stages, one per rank; micro-batches "
         "flow through them. Cuts memory per device; idle 'bubbles' cost time unless there are "
         "many micro-batches."));
  m_zero->setToolTip(
      tr("ZeRO stage across the data-parallel ranks: 0 = everything replicated; 1 = AdamW state "
         "sharded (each rank updates its share, then the weights are all-gathered); 2 = also the "
         "gradients, reduce-scattered layer by layer (not with pipeline stages). The planner shows "
         "the memory each saves."));
  m_microBatches->setToolTip(
      tr("With pipeline stages: how many micro-batches each step pushes through the pipeline at "
         "once. More of them shrink the bubble (idle time ≈ (stages − 1) / (micro-batches + stages − 1))."));
  m_schedule->setToolTip(
      tr("Pipeline schedule. 1F1B runs one forward then one backward per micro-batch once the pipe is "
         "full, so each stage keeps at most 'stages' micro-batches of activations. GPipe runs all "
         "forwards, then all backwards: simpler, more activation memory."));
  m_dtype->setToolTip(
      tr("Matmul precision. bf16 (GPUs) multiplies in bfloat16 with fp32 accumulation and keeps fp32 "
         "master weights and AdamW state: about twice the speed and half the activation memory."));
  m_recompute->setToolTip(
      tr("Keep only each block's input in forward and rebuild the block during backward: activation "
         "memory falls to about one B×T×C tensor per block, for more compute (GPT-2 124M at 1,024 "
         "tokens: +16% per step). The planner shows both."));
  m_schedule->addItem(tr("1F1B (less activation memory)"), QStringLiteral("1f1b"));
  m_schedule->addItem(tr("GPipe"), QStringLiteral("gpipe"));
  m_dtype->addItem(tr("fp32"), QStringLiteral("fp32"));
  m_dtype->addItem(tr("bf16 (GPUs only)"), QStringLiteral("bf16"));
  for (QLabel* l : {m_breakdown, m_plan, m_advice}) {
    l->setWordWrap(true);
    l->setTextInteractionFlags(Qt::TextSelectableByMouse);
  }
  QPalette faint = m_breakdown->palette();
  faint.setColor(QPalette::WindowText, palette().color(QPalette::PlaceholderText));
  m_breakdown->setPalette(faint);

  QFormLayout* form = addForm();
  m_form = form;
  form->addRow(tr("Target"), m_target);
  form->addRow(tr("Preemption"), m_autoRecover);
  form->addRow(tr("Spare nodes"), m_spares);
  form->addRow(tr("Partition"), m_slurmPartition);
  form->addRow(QString(), m_slurmFacts);
  form->addRow(tr("Nodes"), m_slurmNodes);
  form->addRow(tr("GPUs per node"), m_slurmGpus);
  form->addRow(tr("Time limit"), m_slurmTime);
  form->addRow(tr("Checkpoint"), m_slurmLead);
  form->addRow(tr("Auto-resume"), m_slurmAutoResume);
  form->addRow(tr("Ranks (processes)"), m_ranks);
  auto* layoutRow = new QHBoxLayout;
  const struct {
    const char* label;
    QSpinBox* box;
  } layoutSpins[] = {{"data", m_dp}, {"tensor", m_tp}, {"pipeline", m_pp}, {"ZeRO stage", m_zero}};
  for (const auto& s : layoutSpins) {
    layoutRow->addWidget(new QLabel(tr(s.label), this));
    layoutRow->addWidget(s.box);
    layoutRow->addSpacing(8);
  }
  layoutRow->addStretch();
  form->addRow(tr("Parallel degrees"), layoutRow);
  auto* pipeRow = new QHBoxLayout;
  pipeRow->addWidget(m_microBatches);
  pipeRow->addWidget(m_schedule, 1);
  form->addRow(tr("Pipeline micro-batches"), pipeRow);
  form->addRow(QString(), m_batchNote);
  form->addRow(tr("Precision"), m_dtype);
  form->addRow(QString(), m_recompute);
  form->addRow(tr("Memory per device"), m_memory);
  form->addRow(QString(), m_breakdown);
  form->addRow(tr("Speed"), m_plan);
  auto* adviceRow = new QHBoxLayout;
  adviceRow->addWidget(m_advice, 1);
  adviceRow->addWidget(m_recommend, 0, Qt::AlignTop);
  form->addRow(tr("Advice"), adviceRow);
  bindField(QStringLiteral("ranks"), m_ranks);
  bindField(QStringLiteral("parallel"), m_dp);
  bindField(QStringLiteral("parallel.dp"), m_dp);
  bindField(QStringLiteral("parallel.tp"), m_tp);
  bindField(QStringLiteral("parallel.pp"), m_pp);
  bindField(QStringLiteral("parallel.zero"), m_zero);
  bindField(QStringLiteral("parallel.micro_batches"), m_microBatches);
  bindField(QStringLiteral("parallel.schedule"), m_schedule);
  bindField(QStringLiteral("train.dtype"), m_dtype);
  bindField(QStringLiteral("train.recompute"), m_recompute);
  bindField(QStringLiteral("run.threads"), m_ranks);
  bindField(QStringLiteral("memory"), m_memory);
  bindField(QStringLiteral("slurm.partition"), m_slurmPartition);
  bindField(QStringLiteral("slurm.nodes"), m_slurmNodes);
  bindField(QStringLiteral("slurm.gpus"), m_slurmGpus);
  bindField(QStringLiteral("slurm.time"), m_slurmTime);
  bindField(QStringLiteral("slurm.lead"), m_slurmLead);
  bindField(QStringLiteral("slurm"), m_slurmFacts);

  m_searchDelay->setSingleShot(true);
  m_searchDelay->setInterval(150);
  connect(m_searchDelay, &QTimer::timeout, this, [this] { startSearch(m_pendingApply); });
  connect(&m_watcher, &QFutureWatcher<Search>::finished, this, &HardwarePage::onSearched);
  connect(m_recommend, &QPushButton::clicked, this, &HardwarePage::recommend);
  connect(m_target, &QComboBox::currentIndexChanged, this, [this](int i) {
    if (loading()) return;
    draft()->setTargetIndex(i);
    if (draft()->target().kind == HardwareTarget::Kind::Nodes ||
        draft()->target().kind == HardwareTarget::Kind::Cluster)
      reload();  // it set the ranks and dp
  });
  connect(m_autoRecover, &QCheckBox::toggled, this, [this](bool on) {
    if (!loading()) draft()->setAutoRecover(on);
  });
  connect(m_spares, &QListWidget::itemChanged, this, &HardwarePage::editSpares);
  connect(m_slurmPartition, &QComboBox::currentTextChanged, this, &HardwarePage::editCluster);
  connect(m_slurmNodes, &QSpinBox::valueChanged, this, &HardwarePage::editCluster);
  connect(m_slurmGpus, &QSpinBox::valueChanged, this, &HardwarePage::editCluster);
  connect(m_slurmTime, &QLineEdit::textEdited, this, &HardwarePage::editCluster);
  connect(m_slurmLead, &QSpinBox::valueChanged, this, &HardwarePage::editCluster);
  connect(m_slurmAutoResume, &QCheckBox::toggled, this, &HardwarePage::editCluster);
  connect(m_ranks, &QSpinBox::valueChanged, this, [this](int n) {
    if (!loading()) draft()->setRanks(n);
  });
  for (QSpinBox* box : {m_dp, m_tp, m_pp, m_zero, m_microBatches})
    connect(box, &QSpinBox::valueChanged, this, &HardwarePage::editLayout);
  connect(m_schedule, &QComboBox::currentIndexChanged, this, &HardwarePage::editLayout);
  connect(m_dtype, &QComboBox::currentIndexChanged, this, &HardwarePage::editLayout);
  connect(m_recompute, &QCheckBox::toggled, this, &HardwarePage::editLayout);
}

HardwarePage::~HardwarePage() { m_watcher.waitForFinished(); }

void HardwarePage::editLayout() {
  if (loading()) return;
  draft()->editKeepingBatch([this](RunConfig& c) {
    c.parallel.dp = m_dp->value();
    c.parallel.tp = m_tp->value();
    c.parallel.pp = m_pp->value();
    c.parallel.zero = m_zero->value();
    c.parallel.micro_batches = m_microBatches->value();
    c.parallel.schedule = m_schedule->currentData().toString().toStdString();
    c.train.dtype = m_dtype->currentData().toString().toStdString();
    c.train.recompute = m_recompute->isChecked();
  }, ConfigDraft::BatchEdit::Layout);
  // Ranks follow the layout on this machine (a node target's ranks are its GPUs: there the layout
  // must follow them, and the problem says so).
  const HardwareTarget& t = draft()->target();
  if (t.kind != HardwareTarget::Kind::Nodes && !(t.kind == HardwareTarget::Kind::Cluster && t.gpusPerNode > 0)) {
    const int layout = std::max(1, m_dp->value()) * std::max(1, m_tp->value()) * std::max(1, m_pp->value());
    if (layout != draft()->ranks()) {
      draft()->setRanks(layout);
      const QSignalBlocker block(m_ranks);
      m_ranks->setValue(layout);
    }
  }
}

void HardwarePage::syncTargets() {
  QStringList labels;
  for (const HardwareTarget& t : draft()->targets()) labels << t.label;
  QStringList shown;
  for (int i = 0; i < m_target->count(); ++i) shown << m_target->itemText(i);
  const QSignalBlocker block(m_target);
  if (shown != labels) {
    m_target->clear();
    m_target->addItems(labels);
  }
  m_target->setCurrentIndex(draft()->targetIndex());
}

void HardwarePage::syncRecovery() {
  const bool nodes = draft()->target().kind == HardwareTarget::Kind::Nodes;
  const QSignalBlocker blockCheck(m_autoRecover);
  const QSignalBlocker blockList(m_spares);
  m_autoRecover->setChecked(draft()->autoRecover());
  const QStringList candidates = draft()->spareCandidates();
  const QStringList chosen = draft()->spareNodes();
  QStringList shown;
  for (int i = 0; i < m_spares->count(); ++i) shown << m_spares->item(i)->data(Qt::UserRole).toString();
  if (shown != candidates) {
    m_spares->clear();
    for (const StoredNode& n : draft()->storedNodes()) {
      if (!candidates.contains(n.name)) continue;
      QStringList facts;
      facts << (n.gpuCount > 0 ? tr("%1 × %2").arg(n.gpuCount).arg(n.gpuType) : tr("no GPU probed"));
      if (n.usdPerHour > 0) facts << tr("$%1/h").arg(n.usdPerHour, 0, 'f', 2);
      if (n.spot) facts << tr("spot");
      auto* item = new QListWidgetItem(tr("%1 (%2)").arg(n.name, facts.join(QStringLiteral(", "))), m_spares);
      item->setData(Qt::UserRole, n.name);
      item->setFlags(Qt::ItemIsEnabled | Qt::ItemIsUserCheckable);
    }
  }
  for (int i = 0; i < m_spares->count(); ++i) {
    QListWidgetItem* item = m_spares->item(i);
    item->setCheckState(chosen.contains(item->data(Qt::UserRole).toString()) ? Qt::Checked : Qt::Unchecked);
  }
  m_spares->setEnabled(draft()->autoRecover() && !candidates.isEmpty());
  m_form->setRowVisible(m_autoRecover, nodes);
  m_form->setRowVisible(m_spares, nodes);
}

void HardwarePage::editCluster() {
  if (loading()) return;
  ClusterLaunch l = draft()->clusterLaunch();
  const int gpusBefore = l.gpusPerNode, nodesBefore = l.nodes;
  l.partition = m_slurmPartition->currentText().trimmed();
  l.nodes = m_slurmNodes->value();
  l.gpusPerNode = m_slurmGpus->value();
  l.timeLimit = m_slurmTime->text().trimmed();
  l.signalLeadSeconds = m_slurmLead->value();
  l.autoResume = m_slurmAutoResume->isChecked();
  draft()->setClusterLaunch(l);
  // A GPU job's ranks are nodes x GPUs: the ranks and dp rows show what that set.
  if (l.gpusPerNode > 0 && (l.gpusPerNode != gpusBefore || l.nodes != nodesBefore)) reload();
}

void HardwarePage::syncCluster() {
  const bool cluster = draft()->target().kind == HardwareTarget::Kind::Cluster;
  for (QWidget* w : std::initializer_list<QWidget*>{m_slurmPartition, m_slurmFacts, m_slurmNodes, m_slurmGpus,
                                                    m_slurmTime, m_slurmLead, m_slurmAutoResume})
    m_form->setRowVisible(w, cluster);
  if (!cluster) return;
  const ClusterLaunch& l = draft()->clusterLaunch();
  const StoredCluster* c = draft()->targetCluster();
  QStringList names{QString()};
  if (c)
    for (const ClusterPartitionInfo& p : c->partitions) names << p.name;
  QStringList shown;
  for (int i = 0; i < m_slurmPartition->count(); ++i) shown << m_slurmPartition->itemText(i);
  {
    const QSignalBlocker b1(m_slurmPartition), b2(m_slurmNodes), b3(m_slurmGpus), b4(m_slurmTime),
        b5(m_slurmLead), b6(m_slurmAutoResume);
    if (shown != names) {
      m_slurmPartition->clear();
      m_slurmPartition->addItems(names);
    }
    const QString defaultPartition = c ? QString::fromStdString(c->record.partition) : QString();
    m_slurmPartition->lineEdit()->setPlaceholderText(
        defaultPartition.isEmpty() ? tr("the cluster's default") : tr("%1 (the cluster's default)").arg(defaultPartition));
    if (m_slurmPartition->currentText() != l.partition) m_slurmPartition->setCurrentText(l.partition);
    m_slurmNodes->setValue(l.nodes);
    m_slurmGpus->setValue(l.gpusPerNode);
    if (m_slurmTime->text().trimmed() != l.timeLimit) m_slurmTime->setText(l.timeLimit);
    m_slurmLead->setValue(l.signalLeadSeconds);
    m_slurmAutoResume->setChecked(l.autoResume);
  }
  // What the chosen partition offers and what the job costs.
  QStringList facts;
  const ClusterPartitionInfo* p = draft()->targetPartition();
  if (!c || c->partitions.isEmpty()) {
    facts << tr("Not probed yet: run `flotilla clusters probe %1` to see its partitions, nodes and GPUs.")
                 .arg(draft()->target().cluster);
  } else if (!p) {
    facts << tr("The last probe did not list this partition.");
  } else {
    facts << tr("%1: %n node(s)", nullptr, p->nodes).arg(p->name);
    facts << (p->gpusPerNode > 0 ? tr("%1 × %2 GPU per node").arg(p->gpusPerNode).arg(p->gpuType.isEmpty() ? tr("untyped") : p->gpuType)
                                 : tr("no GPUs"));
    if (p->cpusPerNode > 0) facts << tr("%1 CPUs per node").arg(p->cpusPerNode);
    if (!p->maxTime.isEmpty()) facts << tr("time limit at most %1").arg(p->maxTime);
    if (!p->state.isEmpty() && p->state != QLatin1String("UP")) facts << tr("state %1: jobs stay pending").arg(p->state);
  }
  const runs::SlurmPreview preview = draft()->slurmPreview();
  facts << (preview.price.usd_per_hour > 0
                ? tr("$%1/h for this job (%2)")
                      .arg(preview.price.usd_per_hour, 0, 'f', 2)
                      .arg(QString::fromStdString(preview.price.source))
                : tr("unpriced: set one with `flotilla clusters price` to see costs and use a budget"));
  m_slurmFacts->setText(facts.join(QStringLiteral(" · ")));
}

void HardwarePage::editSpares() {
  if (loading()) return;
  QStringList names;
  for (int i = 0; i < m_spares->count(); ++i)
    if (m_spares->item(i)->checkState() == Qt::Checked)
      names << m_spares->item(i)->data(Qt::UserRole).toString();
  draft()->setSpareNodes(names);
}

void HardwarePage::load() {
  const RunConfig& c = draft()->config();
  syncTargets();
  syncRecovery();
  syncCluster();
  m_ranks->setValue(draft()->ranks());
  m_dp->setValue(c.parallel.dp);
  m_tp->setValue(c.parallel.tp);
  m_pp->setValue(c.parallel.pp);
  m_zero->setValue(c.parallel.zero);
  m_microBatches->setValue(c.parallel.micro_batches);
  m_schedule->setCurrentIndex(std::max(0, m_schedule->findData(QString::fromStdString(c.parallel.schedule))));
  m_dtype->setCurrentIndex(std::max(0, m_dtype->findData(QString::fromStdString(c.train.dtype))));
  m_recompute->setChecked(c.train.recompute);
}

void HardwarePage::refreshDerived() {
  ++m_revision;
  m_batchNote->setText(draft()->batchNote());
  m_batchNote->setVisible(!m_batchNote->text().isEmpty());
  // The probe or the store's nodes may have arrived since the last load: keep the list current.
  syncTargets();
  syncRecovery();
  syncCluster();
  const std::optional<Plan> plan = draft()->plan();
  if (!plan) {
    m_memory->setUsage(0, 0);
    m_breakdown->clear();
    const QString where = whereToFix();
    m_plan->setText(where.isEmpty() ? tr("—") : tr("— (no estimate yet: %1)").arg(where));
    m_adviceText.clear();
    m_advice->setText(tr("Recommend fills in the fastest layout that fits."));
    return;
  }
  const MemoryBreakdown& m = plan->peak();
  m_memory->setUsage(m.total(), plan->device.mem_bytes);
  QStringList parts;
  const struct {
    const char* name;
    uint64_t bytes;
  } items[] = {{"weights", m.frozen_weights + m.weights + m.master_weights},
               {"gradients", m.gradients},
               {"AdamW state", m.adam_m + m.adam_v},
               {"activations", m.activations},
               {"workspace", m.workspace},
               {"runtime", m.runtime},
               {"loading the base", m.loading}};
  for (const auto& item : items)
    if (item.bytes) parts << tr("%1 %2").arg(tr(item.name), formatBytes(item.bytes));
  m_breakdown->setText(parts.join(QStringLiteral(" · ")) +
                       (plan->pp > 1 ? tr(" (stage %1, the largest)").arg(plan->peak_stage) : QString()));
  // The engine's own lines (calibration.h), as `flotilla plan` prints them: one truth per number.
  const std::optional<CalibratedPlan> calibrated = draft()->calibratedPlan();
  QString speed = tr("%1; %2 steps take about %3.")
                      .arg(QString::fromStdString(speed_line(*calibrated)))
                      .arg(plan->steps)
                      .arg(formatDuration(plan->run_s));
  speed += QLatin1Char('\n') + QString::fromStdString(calibration_line(*calibrated));
  if (calibrated->last) speed += QLatin1Char('\n') + QString::fromStdString(last_run_line(*calibrated));
  if (const QString link = draft()->planLinkLine(); !link.isEmpty()) speed += QLatin1Char('\n') + link;
  m_plan->setText(speed);
  if (plan->fits) {
    m_searchDelay->stop();
    m_adviceText.clear();
    m_advice->setText(tr("Fits. Recommend fills in the fastest layout that fits."));
  } else {
    m_adviceText.clear();
    m_advice->setText(tr("Does not fit: searching for a layout that does…"));
    m_searchDelay->start();
  }
}

void HardwarePage::recommend() {
  m_pendingApply = true;
  m_searchDelay->stop();
  startSearch(true);
}

void HardwarePage::startSearch(bool apply) {
  if (m_searching) {
    m_pendingApply = m_pendingApply || apply;
    m_searchDelay->start();
    return;
  }
  m_recommend->setEnabled(false);
  m_searching = true;
  const RunConfig config = draft()->config();
  const HardwareTarget target = draft()->target();
  const int ranks = draft()->ranks();
  const quint64 revision = m_revision;
  m_watcher.setFuture(QtConcurrent::run([=] {
    Search s;
    s.revision = revision;
    s.apply = apply;
    s.advice = adviseLayout(config, target, ranks);
    return s;
  }));
}

void HardwarePage::onSearched() {
  m_recommend->setEnabled(true);
  m_searching = false;
  const Search s = m_watcher.result();
  if (s.revision != m_revision) {  // the draft moved while the planner searched: search again
    m_searchDelay->start();
    return;
  }
  // A Recommend pressed during an advice-only search uses that search's (current) result.
  const bool apply = s.apply || m_pendingApply;
  m_pendingApply = false;
  m_searchDelay->stop();
  if (apply && s.advice.config) {
    const RunConfig layout = *s.advice.config;
    const RunConfig before = draft()->config();
    const int ranksBefore = draft()->ranks();
    const std::optional<Plan> planBefore = draft()->plan();
    draft()->setRanks(s.advice.ranks);
    draft()->edit([&](RunConfig& c) { applyLayout(layout, c); });
    reload();
    m_adviceText = describeLayoutChange(before, ranksBefore, planBefore, draft()->config(), draft()->ranks(),
                                        draft()->plan());
    if (!s.advice.note.isEmpty()) m_adviceText += QLatin1Char(' ') + s.advice.note;  // the planner's why
  } else {
    const std::optional<Plan> plan = draft()->plan();
    if (!apply && plan && plan->fits) return;  // fits by now: the advice is moot
    const QString head =
        plan && !plan->fits ? tr("Does not fit: %1 per device needed, %2 available. ")
                                  .arg(formatBytes(plan->peak().total()), formatBytes(plan->device.mem_bytes))
                            : QString();
    m_adviceText =
        head + s.advice.text + (s.advice.config && !apply ? tr(" Press Recommend to use it.") : QString());
  }
  m_advice->setText(m_adviceText);
}

QString HardwarePage::planText() const { return m_plan->text(); }
QString HardwarePage::recommendationText() const { return m_adviceText; }
// Until the result is handled, not merely computed (the finished signal is queued).
bool HardwarePage::isSearching() const { return m_searching || m_searchDelay->isActive(); }

QList<WizardPageBase::FieldProblem> HardwarePage::extraFieldProblems() const {
  QList<FieldProblem> out;
  const auto add = [&out](const char* path, const QString& text) { out.append({QLatin1String(path), text}); };
  const HardwareTarget& t = draft()->target();
  if (t.kind == HardwareTarget::Kind::Nodes) {
    const int nodes = static_cast<int>(t.nodes.size());
    if (draft()->ranks() > t.maxRanks || draft()->ranks() % nodes != 0)
      add("ranks", tr("%n rank(s) chosen, but %1 node(s) run %2 rank(s) each: choose a multiple of %1 up to %3.",
                nullptr, draft()->ranks())
                 .arg(nodes)
                 .arg(t.ranksPerNode)
                 .arg(t.maxRanks));
  } else if (t.kind == HardwareTarget::Kind::Cluster) {
    if (draft()->ranks() > t.maxRanks)
      add("ranks", tr("%n rank(s) chosen, but %1 node(s) × %2 %3 per node hold %4.", nullptr, draft()->ranks())
                       .arg(t.clusterNodes)
                       .arg(t.ranksPerNode)
                       .arg(t.gpusPerNode > 0 ? tr("GPUs") : tr("CPUs"))
                       .arg(t.maxRanks));
  } else if (draft()->ranks() > t.maxRanks) {
    add("ranks", tr("%n rank(s) chosen, but this target has %1 %2.", nullptr, draft()->ranks())
                     .arg(t.maxRanks)
                     .arg(t.kind == HardwareTarget::Kind::Gpu ? tr("GPUs") : tr("cores")));
  }
  if (const auto plan = draft()->plan(); plan && !plan->fits)
    add("memory", tr("Memory: %1 per device needed, the device has %2.")
                      .arg(formatBytes(plan->peak().total()), formatBytes(plan->device.mem_bytes)));
  return out;
}

}  // namespace flotilla::ui
