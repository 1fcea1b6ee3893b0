// Wizard page 1, Model: the template to start from, the run's name and the model's size (a preset
// or custom dimensions), with the parameter count updated as the numbers change.
#pragma once

#include "ui/wizard/pagebase.h"

class QComboBox;
class QLabel;
class QLineEdit;
class QSpinBox;

namespace flotilla::ui {

class TemplateStore;

class ModelPage : public WizardPageBase {
  Q_OBJECT

 public:
  ModelPage(ConfigDraft* draft, TemplateStore* templates, QWidget* parent = nullptr);

  // Re-reads the template list (after Save as template).
  void reloadTemplates();
  QString parameterText() const;

 protected:
  void load() override;
  void refreshDerived() override;
  QStringList extraProblems() const override { return m_templateError.isEmpty() ? QStringList() : QStringList{m_templateError}; }

 private:
  void applyTemplate(int index);
  void editDims();

  TemplateStore* m_templates;
  QString m_templateError;
  QComboBox* m_template;
  QLineEdit* m_name;
  QComboBox* m_preset;
  QSpinBox* m_layers;
  QSpinBox* m_heads;
  QSpinBox* m_width;
  QSpinBox* m_vocab;
  QSpinBox* m_maxSeq;
  QLabel* m_params;
};

}  // namespace flotilla::ui
