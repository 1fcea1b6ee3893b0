// Where and how a stored run goes on (see relaunchdialog.h).
#include "ui/runs/relaunchdialog.h"

#include <QComboBox>
#include <QDialogButtonBox>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLocale>
#include <QPushButton>
#include <QSpinBox>
#include <QVBoxLayout>

#include <algorithm>

#include "db/clusters.h"
#include "db/database.h"
#include "db/nodes.h"
#include "engine/config/config_validate.h"
#include "ui/runs/storerunsview.h"
#include "ui/wizard/memorybar.h"

namespace flotilla::ui {

RelaunchDialog::RelaunchDialog(Mode mode, const QString& runName, const flotilla::RunConfig& config,
                               const QList<HardwareTarget>& targets, int current, QWidget* parent)
    : QDialog(parent),
      m_mode(mode),
      m_original(config),
      m_targets(targets),
      m_current(current),
      m_target(new QComboBox(this)),
      m_checkpoint(new QComboBox(this)),
      m_checkpointLabel(new QLabel(tr("From checkpoint"), this)),
      m_dp(new QSpinBox(this)),
      m_tp(new QSpinBox(this)),
      m_pp(new QSpinBox(this)),
      m_zero(new QSpinBox(this)),
      m_ranks(new QLabel(this)),
      m_batch(new QLabel(this)),
      m_memory(new MemoryBar(this)),
      m_fitText(new QLabel(this)),
      m_buttons(new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this)) {
  setObjectName(QStringLiteral("relaunchDialog"));
  setWindowTitle(mode == Mode::Resume ? tr("Resume %1").arg(runName) : tr("Fork %1").arg(runName));
  auto* intro = new QLabel(
      mode == Mode::Resume
          ? tr("%1 continues from its newest verified checkpoint, in the same row. Choose where it runs and "
               "how the work is split: the checkpoint is re-cut to the new layout, the global batch stays.")
                .arg(runName)
          : tr("A new run starts from the checkpoint chosen with %1's config. Choose where it runs and how "
               "the work is split: the checkpoint is re-cut to the new layout, the global batch stays.")
                .arg(runName),
      this);
  intro->setWordWrap(true);

  m_target->setObjectName(QStringLiteral("relaunchTarget"));
  for (int i = 0; i < m_targets.size(); ++i)
    m_target->addItem(i == m_current ? tr("%1 (where it ran)").arg(m_targets[i].label) : m_targets[i].label);
  if (m_current >= 0 && m_current < m_targets.size()) m_target->setCurrentIndex(m_current);
  m_checkpoint->setObjectName(QStringLiteral("relaunchCheckpoint"));
  m_checkpoint->setVisible(mode == Mode::Fork);
  m_checkpointLabel->setVisible(mode == Mode::Fork);

  const struct {
    QSpinBox* box;
    const char* name;
    int min, max, value;
    const char* tip;
  } spins[] = {
      {m_dp, "relaunchDp", 1, 4096, config.parallel.dp,
       "Data-parallel replicas (each sees a share of the batch)"},
      {m_tp, "relaunchTp", 1, 64, config.parallel.tp,
       "Tensor-parallel degree: must divide the attention heads"},
      {m_pp, "relaunchPp", 1, 256, config.parallel.pp, "Pipeline stages: must divide the layers"},
      {m_zero, "relaunchZero", 0, 2, config.parallel.zero,
       "ZeRO stage: 0 off, 1 optimizer state sharded over dp, 2 also the gradients"},
  };
  for (const auto& s : spins) {
    s.box->setObjectName(QLatin1String(s.name));
    s.box->setRange(s.min, s.max);
    s.box->setValue(std::max(s.min, s.value));
    s.box->setToolTip(tr(s.tip));
    connect(s.box, &QSpinBox::valueChanged, this, &RelaunchDialog::update);
  }
  connect(m_target, &QComboBox::currentIndexChanged, this, &RelaunchDialog::update);
  connect(m_checkpoint, &QComboBox::currentIndexChanged, this, &RelaunchDialog::update);
  m_ranks->setObjectName(QStringLiteral("relaunchRanks"));
  m_batch->setObjectName(QStringLiteral("relaunchBatch"));
  m_batch->setWordWrap(true);
  m_memory->setObjectName(QStringLiteral("relaunchMemory"));
  m_fitText->setObjectName(QStringLiteral("relaunchFit"));
  m_fitText->setWordWrap(true);
  m_fitText->setTextInteractionFlags(Qt::TextSelectableByMouse);

  auto* layoutRow = new QHBoxLayout;
  for (const auto& [label, box] : {std::pair{tr("dp"), m_dp}, std::pair{tr("tp"), m_tp},
                                   std::pair{tr("pp"), m_pp}, std::pair{tr("ZeRO"), m_zero}}) {
    auto* l = new QLabel(label, this);
    l->setBuddy(box);
    layoutRow->addWidget(l);
    layoutRow->addWidget(box);
  }
  layoutRow->addStretch(1);

  auto* form = new QFormLayout;
  form->addRow(m_checkpointLabel, m_checkpoint);
  form->addRow(tr("Where"), m_target);
  form->addRow(tr("Layout"), layoutRow);
  form->addRow(tr("Ranks"), m_ranks);
  form->addRow(tr("Batch"), m_batch);
  form->addRow(tr("Memory per device"), m_memory);
  form->addRow(QString(), m_fitText);

  okButton()->setText(mode == Mode::Resume ? tr("Resume") : tr("Fork"));
  connect(m_buttons, &QDialogButtonBox::accepted, this, [this] {
    if (canAccept()) accept();
  });
  connect(m_buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);

  auto* layout = new QVBoxLayout(this);
  layout->addWidget(intro);
  layout->addLayout(form);
  layout->addStretch(1);
  layout->addWidget(m_buttons);
  update();
  // Wrapped lines take their height for this width: sized once the texts are in.
  setMinimumWidth(640);
  resize(640, heightForWidth(640) > 0 ? heightForWidth(640) : sizeHint().height());
  layout->setSizeConstraint(QLayout::SetMinimumSize);
}

void RelaunchDialog::setCheckpoints(const QList<CheckpointChoice>& checkpoints) {
  const QSignalBlocker block(m_checkpoint);
  m_checkpoint->clear();
  m_checkpointDirs.clear();
  for (const CheckpointChoice& c : checkpoints) {
    m_checkpoint->addItem(c.label);
    m_checkpointDirs.append(c.dir);
  }
  m_checkpoint->setCurrentIndex(checkpoints.isEmpty() ? -1 : 0);
  update();
}

QPushButton* RelaunchDialog::okButton() const { return m_buttons->button(QDialogButtonBox::Ok); }

flotilla::RunConfig RelaunchDialog::layoutConfig(QString* batchNote) const {
  flotilla::RunConfig c = m_original;
  c.parallel.dp = m_dp->value();
  c.parallel.tp = m_tp->value();
  c.parallel.pp = m_pp->value();
  c.parallel.zero = m_zero->value();
  if (c.parallel.pp > 1 && c.parallel.micro_batches < c.parallel.pp) c.parallel.micro_batches = c.parallel.pp;
  const int index = m_target->currentIndex();
  if (index >= 0 && index < m_targets.size()) c.run.device = deviceOf(m_targets[index]);
  // The batch is a training choice and stays: the worker keeps the checkpoint's global batch and
  // accumulation makes up a dp change (docs/distributed.md), so the plan and the checks see that.
  if (c.train.global_batch_tokens == 0) c.train.global_batch_tokens = flotilla::tokens_per_step(m_original);
  if (batchNote) {
    const int64_t before = flotilla::grad_accum_steps(m_original), after = flotilla::grad_accum_steps(c);
    *batchNote = before == after
                     ? QString()
                     : tr("The global batch stays %1 tokens: accumulation %2 → %3 micro-batches per step.")
                           .arg(QLocale().toString(static_cast<qlonglong>(flotilla::tokens_per_step(c))))
                           .arg(before)
                           .arg(after);
  }
  return c;
}

void RelaunchDialog::update() {
  QString note;
  const flotilla::RunConfig c = layoutConfig(&note);
  const int ranks = c.parallel.dp * c.parallel.tp * c.parallel.pp;
  const int index = m_target->currentIndex();
  m_problem.clear();
  m_fit = {};
  m_ranks->setText(
      tr("%1 (dp %2 × tp %3 × pp %4)").arg(ranks).arg(c.parallel.dp).arg(c.parallel.tp).arg(c.parallel.pp));
  m_batch->setText(
      note.isEmpty()
          ? tr("The global batch stays %1 tokens.").arg(QLocale().toString(flotilla::tokens_per_step(c)))
          : note);
  if (index < 0 || index >= m_targets.size()) {
    m_problem = tr("Choose where the run goes on.");
  } else if (m_mode == Mode::Fork && m_checkpoint->currentIndex() < 0) {
    m_problem = tr("This run has no checkpoint to fork from.");
  } else {
    const HardwareTarget& target = m_targets[index];
    if (ranks > target.maxRanks)
      m_problem = tr("%1 ranks, but %2 has %3: lower dp, tp or pp.")
                      .arg(ranks)
                      .arg(target.label)
                      .arg(target.maxRanks);
    const auto problems = flotilla::validate(c, ranks);
    if (m_problem.isEmpty() && !problems.empty())
      m_problem = QString::fromStdString(flotilla::to_string(problems.front()));
    m_fit = checkFit(c, target, ranks);
  }
  m_memory->setUsage(m_fit.planned ? m_fit.used : 0, m_fit.planned ? m_fit.capacity : 0);
  QString text = m_problem.isEmpty()
                     ? m_fit.text
                     : tr("Cannot %1 on this layout: %2")
                           .arg(m_mode == Mode::Resume ? tr("resume") : tr("fork"), m_problem);
  m_fitText->setText(text);
  const bool bad = !m_problem.isEmpty() || (m_fit.planned && !m_fit.fits);
  m_fitText->setStyleSheet(bad ? QStringLiteral("color: #c0392b;") : QString());
  okButton()->setEnabled(canAccept());
}

bool RelaunchDialog::canAccept() const { return m_problem.isEmpty(); }

RelaunchChoice RelaunchDialog::choice() const {
  RelaunchChoice out;
  const int index = m_target->currentIndex();
  if (index >= 0 && index < m_targets.size()) out.target = m_targets[index];
  out.config = layoutConfig(nullptr);
  out.ranks = out.config.parallel.dp * out.config.parallel.tp * out.config.parallel.pp;
  const int cp = m_checkpoint->currentIndex();
  if (m_mode == Mode::Fork && cp >= 0 && cp < m_checkpointDirs.size())
    out.checkpointDir = m_checkpointDirs[cp];
  const auto& a = m_original.parallel;
  const auto& b = out.config.parallel;
  // Only what changed goes to the runs service (nullopt: as the run was).
  if (a.dp != b.dp) out.layout.dp = b.dp;
  if (a.tp != b.tp) out.layout.tp = b.tp;
  if (a.pp != b.pp) out.layout.pp = b.pp;
  if (a.zero != b.zero) out.layout.zero = b.zero;
  out.layoutChanged = !out.layout.empty();
  out.targetChanged = index != m_current;
  return out;
}

QList<HardwareTarget> relaunchTargets(const flotilla::ProbeResult& probe, const QString& databasePath) {
  QList<HardwareTarget> out = hardwareTargets(probe);
  if (databasePath.isEmpty() || !QFileInfo::exists(databasePath)) return out;
  QList<StoredNode> nodes;
  QList<StoredCluster> clusters;
  try {
    db::OpenOptions options;
    options.create = false;
    options.quick_check = false;
    const db::Database db(databasePath.toStdString(), options);
    for (const db::SshNode& n : db::list_ssh_nodes(db))
      nodes.append(StoredNode{QString::fromStdString(n.name), QString::fromStdString(n.gpu_type),
                              static_cast<int>(n.gpu_count), n.usd_per_hour.value_or(0.0), n.spot});
    for (const db::SlurmCluster& c : db::list_clusters(db))
      clusters.append(storedCluster(c, db::partition_prices(db, c.id)));
  } catch (const std::exception&) {
    return out;  // an unreadable store offers this machine only
  }
  out += nodeTargets(nodes);
  out += clusterTargets(clusters);
  return out;
}

runs::Placement placementOf(const HardwareTarget& target, const flotilla::RunConfig& config) {
  switch (target.kind) {
    case HardwareTarget::Kind::Cpu:
    case HardwareTarget::Kind::Gpu:
      return runs::Placement::here();
    case HardwareTarget::Kind::Nodes: {
      std::vector<std::string> names;
      for (const QString& n : target.nodes) names.push_back(n.toStdString());
      return runs::Placement::on_nodes(names);
    }
    case HardwareTarget::Kind::Cluster: {
      runs::Placement p = runs::Placement::on_cluster(target.cluster.toStdString());
      p.slurm_nodes = std::max(1, target.clusterNodes);
      p.gpus_per_node = target.gpusPerNode;
      (void)config;
      return p;
    }
  }
  return runs::Placement::here();
}

int relaunchTargetIndex(const QList<HardwareTarget>& targets, const runs::Placement& where,
                        const flotilla::RunConfig& config) {
  int found = -1;
  for (int i = 0; i < targets.size(); ++i) {
    if (placementOf(targets[i], config).text() != where.text()) continue;
    // This machine offers its CPU and its GPUs: the device the run trained on.
    if (found < 0 || deviceOf(targets[i]) == config.run.device) found = i;
  }
  return found;
}

}  // namespace flotilla::ui
