// Wizard page 5, Checkpoints & evaluation: how often the run saves and measures itself, and how
// often a crashed run restarts from its newest checkpoint (run.max_restarts).
#pragma once

#include "ui/wizard/pagebase.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QSpinBox;

namespace flotilla::ui {

class CheckpointPage : public WizardPageBase {
  Q_OBJECT

 public:
  explicit CheckpointPage(ConfigDraft* draft, QWidget* parent = nullptr);

 protected:
  void load() override;
  void refreshDerived() override;

 private:
  void editValues();

  QSpinBox* m_every;
  QSpinBox* m_keep;
  QCheckBox* m_final;
  QComboBox* m_resume;
  QDoubleSpinBox* m_grace;
  QSpinBox* m_restarts;  // run.max_restarts
  QSpinBox* m_evalEvery;
  QSpinBox* m_evalBatches;
  QSpinBox* m_sampleEvery;
  QSpinBox* m_sampleTokens;
  QLabel* m_summary;
};

}  // namespace flotilla::ui
