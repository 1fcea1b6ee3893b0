// Wizard page 4, Batch & optimizer: steps, the global batch in tokens, the micro-batch (the
// gradient accumulation that follows is shown, not asked), AdamW and the learning-rate schedule,
// drawn from the engine's own LrSchedule so the picture is exactly what training will do.
#pragma once

#include <QVector>

#include "engine/config/run_config.h"
#include "engine/train/lr_schedule.h"
#include "ui/wizard/pagebase.h"

class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QSpinBox;

namespace flotilla::ui {

class LinePlot;
class NumberBox;

// The schedule training builds from a config (engine/train/trainer.cpp does the same).
flotilla::LrSchedule lrScheduleOf(const flotilla::RunConfig& config);
// Up to maxPoints (step, lr) samples over [1, steps], always including both ends.
void sampleSchedule(const flotilla::LrSchedule& s, int maxPoints, QVector<double>* steps,
                    QVector<double>* lrs);

class BatchPage : public WizardPageBase {
  Q_OBJECT

 public:
  explicit BatchPage(ConfigDraft* draft, QWidget* parent = nullptr);
  LinePlot* schedulePlot() const { return m_plot; }
  QString accumulationText() const;
  // The learning rate's out-of-range warning ("" when it is in the usual range).
  QString lrWarning() const;

 protected:
  void load() override;
  void refreshDerived() override;

 private:
  void editNumbers();

  QSpinBox* m_steps;
  QSpinBox* m_microBatch;
  QSpinBox* m_seqLen;
  QSpinBox* m_globalTokens;
  QLabel* m_accum;
  QLabel* m_batchNote;  // what keeping the global batch did
  NumberBox* m_lr;
  NumberBox* m_minRatio;
  QComboBox* m_schedule;
  QSpinBox* m_warmup;
  NumberBox* m_decay;
  NumberBox* m_weightDecay;
  NumberBox* m_clip;
  QLabel* m_lrWarning;
  LinePlot* m_plot;
};

}  // namespace flotilla::ui
