// Find in a log pane: every match of the typed text highlighted, the current one selected and
// scrolled to, "3 of 12" beside the field; Enter goes to the next match, Shift+Enter to the previous.
//
// Decision: a plain case-insensitive substring search over the QPlainTextEdit's document (what a
// user types into a log's find box is a word or an id, not a pattern). The highlights are extra
// selections (the log stays read-only and its text untouched), capped at kMaxHighlights so a
// one-letter search over 5,000 lines stays quick; lines that arrive while a search is open are
// searched again after a short delay, not on every line.
#pragma once

#include <QObject>
#include <QString>
#include <QTextCursor>
#include <QVector>

class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QTimer;

namespace flotilla::ui {

class LogFind : public QObject {
  Q_OBJECT

 public:
  static constexpr int kMaxHighlights = 1000;

  // Works on `log`, reading `field` and writing its counts to `count` (all three owned elsewhere).
  LogFind(QPlainTextEdit* log, QLineEdit* field, QLabel* count, QObject* parent = nullptr);

  void setQuery(const QString& text);  // as typing it in the field does
  void next();
  void previous();
  // Call after lines were appended (searches again soon when a query is open).
  void logChanged();

  int matchCount() const { return static_cast<int>(m_matches.size()); }
  int currentIndex() const { return m_current; }  // -1: none
  QString countText() const;
  // The text of the current match's line ("" when none).
  QString currentLine() const;

 private:
  void search(bool keepPlace);
  void select(int index);
  void paint();

  QPlainTextEdit* m_log;
  QLineEdit* m_field;
  QLabel* m_count;
  QTimer* m_again;
  QString m_query;
  QVector<QTextCursor> m_matches;
  int m_current = -1;
};

}  // namespace flotilla::ui
