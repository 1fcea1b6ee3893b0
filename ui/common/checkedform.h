// A form of line edits (and multi-line text fields), each with its problem drawn in red under it: the
// Add node and Add cluster dialogs' fields.
//
// Decision: a problem shows live once its field was edited (touched) and for every field after OK
// (showAll), so a half-typed form is not covered in red; OK with a problem keeps the dialog open and
// moves the focus to the first field that has one. The dialogs keep their own validation (the same
// runs:: checks as the CLI) and hand the problems in by field key.
#pragma once

#include <QHash>
#include <QObject>
#include <QString>
#include <QStringList>
#include <functional>

class QFormLayout;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QWidget;

namespace flotilla::ui {

class CheckedForm {
 public:
  // `owner` parents the widgets; `changed` runs after the user edits any field.
  CheckedForm(QWidget* owner, std::function<void()> changed);

  QFormLayout* layout() const { return m_form; }
  // Adds the row `label`: a line edit (object name KEY + "Edit") with `extra` (a button) beside it,
  // and its problem label (KEY + "Problem") under it.
  QLineEdit* addField(const QString& key, const QString& label, const QString& placeholder,
                      QWidget* extra = nullptr);
  // Adds a multi-line field (object name KEY + "Edit"), e.g. a command as one argument per line.
  QPlainTextEdit* addTextField(const QString& key, const QString& label, const QString& placeholder);
  QLineEdit* edit(const QString& key) const { return m_edits.value(key); }
  QPlainTextEdit* textEdit(const QString& key) const { return m_texts.value(key); }
  QLabel* problem(const QString& key) const { return m_problems.value(key); }
  QString text(const QString& key) const;
  // Sets a field as if the user had typed it (a file chosen with Browse…).
  void setTouchedText(const QString& key, const QString& text);
  // Sets a field's initial value (not touched: its problems wait for an edit or OK).
  void setInitialText(const QString& key, const QString& text);

  // Shows each field's problems as the rules above say; returns how many problems there are.
  int show(const QHash<QString, QStringList>& problems);
  // After OK: every problem shown. True when there is none; else the focus goes to the first field
  // (in the order they were added) that has one.
  bool acceptable(const QHash<QString, QStringList>& problems);

 private:
  QLabel* makeProblem(const QString& key);  // the red label under a field, hidden
  QWidget* m_owner;
  std::function<void()> m_changed;
  QFormLayout* m_form;
  QStringList m_order;
  QHash<QString, QLineEdit*> m_edits;
  QHash<QString, QPlainTextEdit*> m_texts;
  bool m_settingInitial = false;
  QHash<QString, QLabel*> m_problems;
  QHash<QString, bool> m_touched;
  bool m_showAll = false;
};

}  // namespace flotilla::ui
