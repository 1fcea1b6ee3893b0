// Wizard page 7, Review: the whole config as the TOML file the worker will read, editable, parsed
// and validated as the user types (the engine's parser and validate(), every problem listed), and
// savable as a template. For a Slurm cluster target, also the batch script the launch submits
// (runs::preview_slurm_script: the same generator as the submission), read-only.
//
// Decision: a parse that succeeds replaces the draft, so the other pages show the edit when the
// user goes Back; the text itself is only rewritten when the page is entered, never while typing.
#pragma once

#include "ui/wizard/pagebase.h"

class QLabel;
class QPlainTextEdit;
class QPushButton;
class QTimer;

namespace flotilla::ui {

class TemplateStore;

class ReviewPage : public WizardPageBase {
  Q_OBJECT

 public:
  ReviewPage(ConfigDraft* draft, TemplateStore* templates, QWidget* parent = nullptr);

  QPlainTextEdit* editor() const { return m_editor; }
  QPlainTextEdit* batchScript() const { return m_script; }
  // Parses the editor's text now (instead of after the typing pause).
  void applyText();
  // Saves the draft as <templates>/<name>.toml; false with the reason shown on the page.
  bool saveTemplate(const QString& name);
  QString statusText() const;
  bool validatePage() override;
  // The model's line above the config (a Hugging Face name and its commit, issue 40) and why Launch
  // must wait ("" for none: a download of the model under way).
  void setModelState(const QString& note, const QString& blocker);
  QString modelNote() const;
  // A block under the config (the wizard's "Add to queue" limits).
  void addBelow(QWidget* widget) { addBlock(widget); }

 signals:
  void templateSaved(const QString& name);

 protected:
  void load() override;
  void refreshDerived() override;
  QStringList extraProblems() const override;

 private:
  TemplateStore* m_templates;
  QPlainTextEdit* m_editor;
  QLabel* m_scriptTitle;
  QPlainTextEdit* m_script;
  QPushButton* m_save;
  QLabel* m_status;
  QLabel* m_modelNote;
  QString m_modelBlocker;
  QTimer* m_parseDelay;
  QString m_parseError;
  bool m_applying = false;
};

}  // namespace flotilla::ui
