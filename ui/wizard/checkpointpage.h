// Wizard page 5, Checkpoints & evaluation: how often the run saves and measures itself, how often
// a crashed run restarts from its newest checkpoint (run.max_restarts), and whether it also writes a
// Hugging Face folder at the end (checkpoint.export_hf, Llama family only: the option is disabled
// with the reason for GPT-2; a LoRA run's folder is the model with the adapter merged in) and, for a
// LoRA run, the adapter as a PEFT folder (checkpoint.export_peft; shown while LoRA is on or the key
// is set, so a leftover one can be cleared where validate() names it). Evaluation tasks (eval.tasks:
// task files scored with the validation loss, "Add task file…" appends one; eval.task_limit) and the
// task score whose best checkpoint is kept from purging (checkpoint.keep_best).
#pragma once

#include "ui/wizard/pagebase.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QFormLayout;
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
  void editPeft();
  void editTasks();

  QFormLayout* m_form = nullptr;
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
  QCheckBox* m_exportPeft;
  QWidget* m_peftRow;
  QLineEdit* m_peftDir;
  QLabel* m_peftNote;
  QWidget* m_tasksRow;
  QLineEdit* m_tasks;     // eval.tasks
  QSpinBox* m_taskLimit;  // eval.task_limit
  QComboBox* m_keepBest;  // checkpoint.keep_best (editable: auto, none or task/<task>/<score>)
};

}  // namespace flotilla::ui
