// Wizard page 5, Checkpoints & evaluation: how often the run saves and measures itself, how often
// a crashed run restarts from its newest checkpoint (run.max_restarts), and whether it also writes a
// Hugging Face folder at the end (checkpoint.export_hf, Llama family only: the option is disabled
// with the reason for GPT-2).
#pragma once

#include "ui/wizard/pagebase.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QSpinBox;

namespace flotilla::ui {

class CheckpointPage : public WizardPageBase {
  Q_OBJECT

 public:
  explicit CheckpointPage(ConfigDraft* draft, QWidget* parent = nullptr);

 protected:
  void load() override;
  void refreshDerived() override;
  QStringList extraProblems() const override;

 private:
  void editValues();
  void editExport();

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
  QCheckBox* m_export;
  QWidget* m_exportRow;
  QLineEdit* m_exportDir;
  QComboBox* m_exportDtype;
  QLabel* m_exportNote;
};

}  // namespace flotilla::ui
