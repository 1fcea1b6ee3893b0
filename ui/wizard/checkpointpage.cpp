// Checkpoints & evaluation page (see checkpointpage.h).
#include "ui/wizard/checkpointpage.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QLabel>
#include <QSpinBox>

#include <algorithm>

#include "ui/wizard/configdraft.h"

namespace flotilla::ui {

CheckpointPage::CheckpointPage(ConfigDraft* configDraft, QWidget* parent)
    : WizardPageBase(configDraft, {QStringLiteral("checkpoint"), QStringLiteral("eval")}, parent),
      m_every(new QSpinBox(this)),
      m_keep(new QSpinBox(this)),
      m_final(new QCheckBox(tr("Save a checkpoint after the last step"), this)),
      m_resume(new QComboBox(this)),
      m_grace(new QDoubleSpinBox(this)),
      m_restarts(new QSpinBox(this)),
      m_evalEvery(new QSpinBox(this)),
      m_evalBatches(new QSpinBox(this)),
      m_sampleEvery(new QSpinBox(this)),
      m_sampleTokens(new QSpinBox(this)),
      m_summary(new QLabel(this)) {
  setTitle(tr("Checkpoints & evaluation"));
  setSubTitle(tr("When the run saves its state (to resume, fork or export it) and measures validation loss."));
  m_every->setObjectName(QStringLiteral("checkpointEvery"));
  m_keep->setObjectName(QStringLiteral("keepLast"));
  m_evalEvery->setObjectName(QStringLiteral("evalEvery"));
  m_evalBatches->setObjectName(QStringLiteral("evalBatches"));
  m_summary->setObjectName(QStringLiteral("checkpointSummary"));
  m_summary->setWordWrap(true);
  for (QSpinBox* b : {m_every, m_evalEvery, m_sampleEvery}) {
    b->setRange(-1, 2'000'000'000);
    b->setGroupSeparatorShown(true);
  }
  m_every->setSpecialValueText(QString());
  m_keep->setRange(0, 1000);
  m_evalBatches->setRange(0, 100000);
  m_sampleTokens->setRange(0, 100000);
  m_grace->setRange(0, 86400);
  m_grace->setSuffix(tr(" s"));
  m_restarts->setObjectName(QStringLiteral("maxRestarts"));
  m_restarts->setRange(0, 100);
  m_restarts->setToolTip(
      tr("When a rank crashes (killed, out of memory on one host, a lost peer), every rank restarts "
         "from the newest verified checkpoint, at most this many times (run.max_restarts). "
         "Preemptions do not count; config and data errors never restart."));
  m_resume->addItem(tr("from the newest verified checkpoint in the run folder (auto)"), QStringLiteral("auto"));
  m_resume->addItem(tr("never: always start fresh (none)"), QStringLiteral("none"));

  QFormLayout* form = addForm();
  form->addRow(tr("Save every (steps; 0 = at the end)"), m_every);
  form->addRow(tr("Keep the newest"), m_keep);
  form->addRow(QString(), m_final);
  form->addRow(tr("On restart, resume"), m_resume);
  form->addRow(tr("Preemption grace"), m_grace);
  form->addRow(tr("Crash restarts"), m_restarts);
  form->addRow(tr("Validation every (steps; 0 = at the end)"), m_evalEvery);
  form->addRow(tr("Validation micro-batches"), m_evalBatches);
  form->addRow(tr("Text sample every (steps; 0 = off)"), m_sampleEvery);
  form->addRow(tr("Sample length (tokens)"), m_sampleTokens);
  form->addRow(QString(), m_summary);

  for (QSpinBox* b : {m_every, m_keep, m_restarts, m_evalEvery, m_evalBatches, m_sampleEvery, m_sampleTokens})
    connect(b, &QSpinBox::valueChanged, this, &CheckpointPage::editValues);
  connect(m_final, &QCheckBox::toggled, this, &CheckpointPage::editValues);
  connect(m_resume, &QComboBox::currentIndexChanged, this, &CheckpointPage::editValues);
  connect(m_grace, &QDoubleSpinBox::valueChanged, this, &CheckpointPage::editValues);
}

void CheckpointPage::editValues() {
  if (loading()) return;
  draft()->edit([this](RunConfig& c) {
    c.checkpoint.every = m_every->value();
    c.checkpoint.keep_last = m_keep->value();
    c.checkpoint.save_final = m_final->isChecked();
    const QString resume = m_resume->currentData().toString();
    if (!resume.isEmpty()) c.checkpoint.resume = resume.toStdString();
    if (m_grace->value() != QString::number(c.checkpoint.preempt_grace_s, 'f', m_grace->decimals()).toDouble())
      c.checkpoint.preempt_grace_s = m_grace->value();
    c.run.max_restarts = m_restarts->value();
    c.eval.every = m_evalEvery->value();
    c.eval.batches = m_evalBatches->value();
    c.eval.sample_every = m_sampleEvery->value();
    c.eval.sample_tokens = m_sampleTokens->value();
  });
}

void CheckpointPage::load() {
  const RunConfig& c = draft()->config();
  const auto clamp = [](int64_t v) { return static_cast<int>(std::min<int64_t>(v, 2'000'000'000)); };
  m_every->setValue(clamp(c.checkpoint.every));
  m_keep->setValue(c.checkpoint.keep_last);
  m_final->setChecked(c.checkpoint.save_final);
  const QString resume = QString::fromStdString(c.checkpoint.resume);
  if (m_resume->findData(resume) < 0) m_resume->addItem(tr("from %1").arg(resume), resume);
  m_resume->setCurrentIndex(m_resume->findData(resume));
  m_grace->setValue(c.checkpoint.preempt_grace_s);
  m_restarts->setValue(std::clamp(c.run.max_restarts, 0, 100));
  m_evalEvery->setValue(clamp(c.eval.every));
  m_evalBatches->setValue(c.eval.batches);
  m_sampleEvery->setValue(clamp(c.eval.sample_every));
  m_sampleTokens->setValue(c.eval.sample_tokens);
}

void CheckpointPage::refreshDerived() {
  const RunConfig& c = draft()->config();
  if (c.train.steps < 1 || c.checkpoint.every < 0) {
    m_summary->clear();
    return;
  }
  const int64_t saves = (c.checkpoint.every > 0 ? c.train.steps / c.checkpoint.every : 0) + (c.checkpoint.save_final ? 1 : 0);
  const int64_t evals = c.eval.every > 0 ? c.train.steps / c.eval.every : 1;
  m_summary->setText(tr("Over %1 steps: about %2 checkpoint(s) saved, the newest %3 kept; %4 validation measurement(s).")
                         .arg(c.train.steps)
                         .arg(saves)
                         .arg(c.checkpoint.keep_last)
                         .arg(evals));
}

}  // namespace flotilla::ui
