// The base of every New Run wizard page: a view of the shared ConfigDraft whose Next button is
// enabled exactly when the engine's validate() reports nothing under the page's field paths.
//
// Decision: the problems are shown on the page in the engine's own words ("train.micro_batch: 0
// must be >= 1"). A problem whose field path a page bound to a widget (bindField) is shown right
// under that widget's form row, and the widget is tinted and carries the message as its tooltip;
// the rest are listed under the page's fields. A page adds its own checks (a file not prepared yet)
// through extraProblems() (the list) and extraFieldProblems() (beside a bound field). Widgets are filled by load() inside a guard,
// so filling them never writes back into the draft: only a user's edit does.
#pragma once

#include <QList>
#include <QStringList>
#include <QWizardPage>

class QFormLayout;
class QLabel;
class QVBoxLayout;

namespace flotilla::ui {

class ConfigDraft;

class WizardPageBase : public QWizardPage {
  Q_OBJECT

 public:
  WizardPageBase(ConfigDraft* draft, const QStringList& fieldPrefixes, QWidget* parent = nullptr);

  bool isComplete() const override;
  // Next and Finish also refuse a page with problems when called from code (QWizard::next()).
  bool validatePage() override;
  void initializePage() override;
  // Every message shown now, beside a field or in the list (engine problems first, then the page's own).
  QStringList shownProblems() const;
  // The messages shown beside the widget bound to `path` now (empty: none).
  QString problemBeside(const QString& path) const;
  // Where the first problem of the draft (under `prefixes`, when given) is shown, for a figure
  // that waits on it: "fix the problem under “Attention heads”", "… listed at the foot of this
  // page", or "fix it on the Checkpoints page: eval.every: …" (issue 34 item 11). Empty: none.
  QString whereToFix(const QStringList& prefixes = {}) const;
  // Whether a problem at `path` belongs to this page (its field prefixes; the Review page's "" not counted).
  bool ownsPath(const QString& path) const;

  struct FieldProblem {
    QString path;  // a bound path, or one under it ("parallel.tp" goes beside "parallel")
    QString text;  // shown as it is
  };

 protected:
  // Fills the widgets from the draft (called inside the load guard).
  virtual void load() = 0;
  // Updates read-only parts (derived numbers, plots) after any change; default nothing.
  virtual void refreshDerived() {}
  // Page-specific problems that block Next, in plain words.
  virtual QStringList extraProblems() const { return {}; }
  // Page-specific problems of one field, shown beside it when its path is bound.
  virtual QList<FieldProblem> extraFieldProblems() const { return {}; }
  // Shows the problems under `path` beside `widget` (call once the widget is in one of the page's
  // forms; widgets sharing a form row share the message under it). The longest bound path wins.
  void bindField(const QString& path, QWidget* widget);
  // True while load() runs: edit handlers return early.
  bool loading() const { return m_loading; }
  ConfigDraft* draft() const { return m_draft; }
  // The page's layout: a form for fields, then whatever the page adds, then the problems.
  QVBoxLayout* pageLayout() const { return m_layout; }
  QFormLayout* addForm();
  // Adds a widget or layout below the forms added so far (above the problems).
  void addBlock(QWidget* widget, int stretch = 0);
  void addBlock(QLayout* layout);
  // Re-reads everything from the draft (after a replace()).
  void reload();
  // Call from a page's own state changes that do not go through the draft.
  void recheck();

 private:
  void onDraftChanged();
  QList<FieldProblem> allProblems() const;
  struct Binding {
    QString path;
    QWidget* widget;
    QString tooltip;  // the widget's own tooltip, restored once the problem is gone
    QLabel* message;  // under the widget's form row
    QFormLayout* form;
    QString label;  // the form row's label ("" for a row without one)
  };
  QList<Binding> m_bindings;

  ConfigDraft* m_draft;
  QStringList m_prefixes;
  QVBoxLayout* m_layout;
  QLabel* m_problems;
  bool m_loading = false;
  bool m_complete = true;
};

}  // namespace flotilla::ui
