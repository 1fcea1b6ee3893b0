// Batch & optimizer page (see batchpage.h).
#include "ui/wizard/batchpage.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLocale>
#include <QSpinBox>

#include <algorithm>

#include "engine/config/config_validate.h"
#include "ui/common/numberbox.h"
#include "ui/plot/lineplot.h"
#include "ui/wizard/configdraft.h"
#include "ui/wizard/wizardformat.h"

namespace flotilla::ui {

flotilla::LrSchedule lrScheduleOf(const flotilla::RunConfig& c) {
  return flotilla::LrSchedule{c.optim.schedule,     c.optim.lr,    c.optim.min_lr_ratio,
                              c.optim.warmup_steps, c.train.steps, c.optim.decay_fraction};
}

void sampleSchedule(const flotilla::LrSchedule& s, int maxPoints, QVector<double>* steps,
                    QVector<double>* lrs) {
  steps->clear();
  lrs->clear();
  const int64_t total = std::max<int64_t>(1, s.total_steps);
  const int64_t stride = std::max<int64_t>(1, total / std::max(2, maxPoints - 1));
  for (int64_t step = 1; step <= total; step += stride) {
    steps->append(static_cast<double>(step));
    lrs->append(s.at(step));
  }
  if (steps->back() != static_cast<double>(total)) {
    steps->append(static_cast<double>(total));
    lrs->append(s.at(total));
  }
}

BatchPage::BatchPage(ConfigDraft* configDraft, QWidget* parent)
    : WizardPageBase(configDraft,
                     {QStringLiteral("train.steps"), QStringLiteral("train.micro_batch"),
                      QStringLiteral("train.seq_len"), QStringLiteral("train.global_batch_tokens"),
                      QStringLiteral("train.grad_clip"), QStringLiteral("optim")},
                     parent),
      m_steps(new QSpinBox(this)),
      m_microBatch(new QSpinBox(this)),
      m_seqLen(new QSpinBox(this)),
      m_globalTokens(new QSpinBox(this)),
      m_accum(new QLabel(this)),
      m_batchNote(new QLabel(this)),
      m_lr(new NumberBox(this)),
      m_minRatio(new NumberBox(this)),
      m_schedule(new QComboBox(this)),
      m_warmup(new QSpinBox(this)),
      m_decay(new NumberBox(this)),
      m_weightDecay(new NumberBox(this)),
      m_clip(new NumberBox(this)),
      m_lrWarning(new QLabel(this)),
      m_plot(new LinePlot(tr("step"), tr("learning rate"), this)) {
  setTitle(tr("Batch & optimizer"));
  setSubTitle(tr("How many tokens each optimizer step sees, and how the learning rate moves over the run."));
  m_steps->setObjectName(QStringLiteral("steps"));
  m_microBatch->setObjectName(QStringLiteral("microBatch"));
  m_seqLen->setObjectName(QStringLiteral("seqLen"));
  m_globalTokens->setObjectName(QStringLiteral("globalBatchTokens"));
  m_accum->setObjectName(QStringLiteral("accumulation"));
  m_batchNote->setObjectName(QStringLiteral("batchNote"));
  m_batchNote->setWordWrap(true);
  m_lr->setObjectName(QStringLiteral("lr"));
  m_minRatio->setObjectName(QStringLiteral("minLrRatio"));
  m_schedule->setObjectName(QStringLiteral("schedule"));
  m_warmup->setObjectName(QStringLiteral("warmupSteps"));
  m_decay->setObjectName(QStringLiteral("decayFraction"));
  m_plot->setObjectName(QStringLiteral("schedulePlot"));
  m_steps->setRange(0, 2'000'000'000);
  m_microBatch->setRange(0, 4096);
  m_seqLen->setRange(0, 1 << 17);
  m_globalTokens->setRange(0, 2'000'000'000);
  m_globalTokens->setSingleStep(1024);
  m_warmup->setRange(-1, 2'000'000'000);
  for (QSpinBox* b : {m_steps, m_globalTokens, m_warmup}) b->setGroupSeparatorShown(true);
  // Numbers as typed (3e-4, 0.0000003), never clamped: validate() explains a bad one, and the
  // learning rate warns outside the usual range (ui/common/numberbox.h).
  for (NumberBox* b : {m_lr, m_minRatio, m_decay, m_weightDecay, m_clip}) b->setMinimum(0);
  m_lr->setSingleStep(1e-4);
  m_lr->setSaneRange(1e-6, 1e-2, tr("A peak learning rate"));
  m_lr->setToolTip(tr("AdamW's peak learning rate: 3e-4 and 0.0003 are the same; usually 1e-5 to 1e-2"));
  m_lrWarning->setObjectName(QStringLiteral("lrWarning"));
  m_lrWarning->setWordWrap(true);
  // Amber that reads at 4.5:1 on either theme's window (WCAG AA).
  m_lrWarning->setStyleSheet(palette().color(QPalette::Window).lightness() < 128
                                 ? QStringLiteral("QLabel { color: #f0b050; }")
                                 : QStringLiteral("QLabel { color: #8a5300; }"));
  m_lrWarning->hide();
  m_minRatio->setSingleStep(0.05);
  m_decay->setSingleStep(0.05);
  m_weightDecay->setSingleStep(0.01);
  m_clip->setSpecialValueText(tr("off"));
  for (const char* kind : {"cosine", "linear", "wsd", "constant"})
    m_schedule->addItem(QLatin1String(kind), QLatin1String(kind));
  m_globalTokens->setToolTip(
      tr("Tokens per optimizer step. Larger than micro-batch × sequence × data-parallel "
         "ranks means gradient accumulation. It stays as it is when the micro-batch, the sequence "
         "length or the layout changes: the accumulation adjusts."));

  QFormLayout* form = addForm();
  form->addRow(tr("Optimizer steps"), m_steps);
  auto* microRow = new QHBoxLayout;
  microRow->addWidget(m_microBatch);
  microRow->addWidget(new QLabel(tr("sequences of"), this));
  microRow->addWidget(m_seqLen);
  microRow->addWidget(new QLabel(tr("tokens"), this));
  microRow->addStretch();
  form->addRow(tr("Micro-batch"), microRow);
  form->addRow(tr("Global batch (tokens)"), m_globalTokens);
  form->addRow(tr("Gradient accumulation"), m_accum);
  form->addRow(QString(), m_batchNote);
  auto* lrRow = new QHBoxLayout;
  lrRow->addWidget(m_lr);
  lrRow->addWidget(new QLabel(tr("final ×"), this));
  lrRow->addWidget(m_minRatio);
  lrRow->addStretch();
  form->addRow(tr("Peak learning rate"), lrRow);
  form->addRow(QString(), m_lrWarning);
  auto* schedRow = new QHBoxLayout;
  schedRow->addWidget(m_schedule);
  schedRow->addWidget(new QLabel(tr("warmup steps"), this));
  schedRow->addWidget(m_warmup);
  schedRow->addWidget(new QLabel(tr("WSD decay fraction"), this));
  schedRow->addWidget(m_decay);
  schedRow->addStretch();
  form->addRow(tr("Schedule"), schedRow);
  auto* regRow = new QHBoxLayout;
  regRow->addWidget(m_weightDecay);
  regRow->addWidget(new QLabel(tr("gradient clip"), this));
  regRow->addWidget(m_clip);
  regRow->addStretch();
  form->addRow(tr("Weight decay"), regRow);
  bindField(QStringLiteral("train.steps"), m_steps);
  bindField(QStringLiteral("train.micro_batch"), m_microBatch);
  bindField(QStringLiteral("train.seq_len"), m_seqLen);
  bindField(QStringLiteral("train.global_batch_tokens"), m_globalTokens);
  bindField(QStringLiteral("optim.lr"), m_lr);
  bindField(QStringLiteral("optim.min_lr_ratio"), m_minRatio);
  bindField(QStringLiteral("optim.schedule"), m_schedule);
  bindField(QStringLiteral("optim.warmup_steps"), m_warmup);
  bindField(QStringLiteral("optim.decay_fraction"), m_decay);
  bindField(QStringLiteral("optim.weight_decay"), m_weightDecay);
  bindField(QStringLiteral("train.grad_clip"), m_clip);
  addBlock(m_plot, 1);

  for (QSpinBox* b : {m_steps, m_microBatch, m_seqLen, m_warmup})
    connect(b, &QSpinBox::valueChanged, this, &BatchPage::editNumbers);
  for (NumberBox* b : {m_lr, m_minRatio, m_decay, m_weightDecay, m_clip})
    connect(b, &QDoubleSpinBox::valueChanged, this, &BatchPage::editNumbers);
  connect(m_schedule, &QComboBox::currentIndexChanged, this, &BatchPage::editNumbers);
  connect(m_globalTokens, &QSpinBox::valueChanged, this, [this](int tokens) {
    if (loading()) return;
    draft()->clearBatchNote();
    draft()->edit([tokens](RunConfig& c) {
      // The natural batch is written as 0 ("no accumulation"), so it follows later layout changes.
      c.train.global_batch_tokens = tokens == naturalBatchTokens(c) ? 0 : tokens;
    });
  });
}

void BatchPage::editNumbers() {
  if (loading()) return;
  draft()->editKeepingBatch([this](RunConfig& c) {
    c.train.steps = m_steps->value();
    c.train.micro_batch = m_microBatch->value();
    c.train.seq_len = m_seqLen->value();
    c.optim.warmup_steps = m_warmup->value();
    c.optim.schedule = m_schedule->currentData().toString().toStdString();
    // Only a changed spin box writes its value: the rest keep the config's exact numbers, which a
    // spin box's decimals could round.
    const auto keep = [](double& field, const QDoubleSpinBox* box) {
      if (box->value() != QString::number(field, 'f', box->decimals()).toDouble()) field = box->value();
    };
    keep(c.optim.lr, m_lr);
    keep(c.optim.min_lr_ratio, m_minRatio);
    keep(c.optim.decay_fraction, m_decay);
    keep(c.optim.weight_decay, m_weightDecay);
    keep(c.train.grad_clip, m_clip);
  }, ConfigDraft::BatchEdit::Batch);
}

void BatchPage::load() {
  const RunConfig& c = draft()->config();
  m_steps->setValue(static_cast<int>(std::min<int64_t>(c.train.steps, m_steps->maximum())));
  m_microBatch->setValue(c.train.micro_batch);
  m_seqLen->setValue(c.train.seq_len);
  m_warmup->setValue(static_cast<int>(std::min<int64_t>(c.optim.warmup_steps, m_warmup->maximum())));
  m_schedule->setCurrentIndex(std::max(0, m_schedule->findData(QString::fromStdString(c.optim.schedule))));
  m_lr->setValue(c.optim.lr);
  m_minRatio->setValue(c.optim.min_lr_ratio);
  m_decay->setValue(c.optim.decay_fraction);
  m_weightDecay->setValue(c.optim.weight_decay);
  m_clip->setValue(c.train.grad_clip);
}

QString BatchPage::accumulationText() const { return m_accum->text(); }
QString BatchPage::lrWarning() const { return m_lrWarning->isHidden() ? QString() : m_lrWarning->text(); }

void BatchPage::refreshDerived() {
  const RunConfig& c = draft()->config();
  {
    const QSignalBlocker block(m_globalTokens);
    m_globalTokens->setValue(
        static_cast<int>(std::min<int64_t>(flotilla::tokens_per_step(c), m_globalTokens->maximum())));
  }
  m_batchNote->setText(draft()->batchNote());
  m_batchNote->setVisible(!m_batchNote->text().isEmpty());
  m_lrWarning->setText(m_lr->saneWarning());
  m_lrWarning->setVisible(!m_lrWarning->text().isEmpty());
  m_decay->setEnabled(c.optim.schedule == "wsd");
  m_minRatio->setEnabled(c.optim.schedule != "constant");
  const bool geometryOk =
      draft()->problemsUnder({QStringLiteral("train"), QStringLiteral("parallel")}).isEmpty();
  if (geometryOk) {
    const int64_t accum = flotilla::grad_accum_steps(c);
    const int64_t perStep = flotilla::tokens_per_step(c);
    m_accum->setText(
        tr("%1 micro-batch(es) per rank per step; %2 tokens per step, %3 tokens in the run")
            .arg(accum)
            .arg(QLocale().toString(static_cast<qlonglong>(perStep)))
            .arg(formatCount(static_cast<double>(perStep) * static_cast<double>(c.train.steps))));
  } else {
    m_accum->setText(tr("— (%1)").arg(whereToFix({QStringLiteral("train"), QStringLiteral("parallel")})));
  }
  if (c.train.steps >= 1 && draft()->problemsUnder({QStringLiteral("optim")}).isEmpty()) {
    QVector<double> steps, lrs;
    sampleSchedule(lrScheduleOf(c), 400, &steps, &lrs);
    m_plot->setData(steps, lrs);
  } else {
    m_plot->setData({}, {});
  }
}

}  // namespace flotilla::ui
