// Find in a log pane (see logfind.h).
#include "ui/live/logfind.h"

#include <QKeyEvent>
#include <QLabel>
#include <QLineEdit>
#include <QPalette>
#include <QPlainTextEdit>
#include <QTextBlock>
#include <QTextDocument>
#include <QTimer>

namespace flotilla::ui {
namespace {

// Enter and Shift+Enter in the field step through the matches; Escape clears it.
class FieldKeys : public QObject {
 public:
  explicit FieldKeys(LogFind* find, QLineEdit* field) : QObject(field), m_find(find), m_field(field) {}

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override {
    if (watched == m_field && event->type() == QEvent::KeyPress) {
      const auto* key = static_cast<QKeyEvent*>(event);
      if (key->key() == Qt::Key_Return || key->key() == Qt::Key_Enter) {
        if (key->modifiers() & Qt::ShiftModifier) {
          m_find->previous();
        } else {
          m_find->next();
        }
        return true;
      }
      if (key->key() == Qt::Key_Escape && !m_field->text().isEmpty()) {
        m_field->clear();
        return true;
      }
    }
    return false;
  }

 private:
  LogFind* m_find;
  QLineEdit* m_field;
};

}  // namespace

LogFind::LogFind(QPlainTextEdit* log, QLineEdit* field, QLabel* count, QObject* parent)
    : QObject(parent), m_log(log), m_field(field), m_count(count), m_again(new QTimer(this)) {
  m_again->setSingleShot(true);
  m_again->setInterval(250);
  connect(m_again, &QTimer::timeout, this, [this] { search(true); });
  connect(m_field, &QLineEdit::textChanged, this, &LogFind::setQuery);
  m_field->installEventFilter(new FieldKeys(this, m_field));
  m_count->clear();
}

void LogFind::setQuery(const QString& text) {
  if (m_field->text() != text) m_field->setText(text);  // comes back here through textChanged
  if (text == m_query) return;
  m_query = text;
  search(false);
}

void LogFind::logChanged() {
  if (!m_query.isEmpty() && !m_again->isActive()) m_again->start();
}

void LogFind::search(bool keepPlace) {
  const int was = m_current;
  const int wasPosition = was >= 0 && was < m_matches.size() ? m_matches[was].selectionStart() : -1;
  m_matches.clear();
  m_current = -1;
  if (!m_query.isEmpty()) {
    QTextDocument* doc = m_log->document();
    QTextCursor at(doc);
    while (true) {
      at = doc->find(m_query, at);  // case-insensitive without FindCaseSensitively
      if (at.isNull()) break;
      m_matches.append(at);
    }
  }
  if (!m_matches.isEmpty()) {
    int pick = static_cast<int>(m_matches.size()) - 1;  // a new query: the newest line first
    if (keepPlace && wasPosition >= 0) {
      // Lines only arrive at the end (and the oldest fall off the top): keep the same match.
      pick = 0;
      for (int i = 0; i < m_matches.size(); ++i)
        if (m_matches[i].selectionStart() <= wasPosition) pick = i;
    }
    select(pick);
  } else {
    paint();
  }
}

void LogFind::next() {
  if (m_matches.isEmpty()) return;
  select((m_current + 1) % static_cast<int>(m_matches.size()));
}

void LogFind::previous() {
  if (m_matches.isEmpty()) return;
  const int n = static_cast<int>(m_matches.size());
  select((m_current - 1 + n) % n);
}

void LogFind::select(int index) {
  m_current = index;
  QTextCursor cursor = m_matches[index];
  m_log->setTextCursor(cursor);
  m_log->ensureCursorVisible();
  paint();
}

void LogFind::paint() {
  QList<QTextEdit::ExtraSelection> marks;
  const QPalette pal = m_log->palette();
  const bool dark = pal.color(QPalette::Base).lightness() < 128;
  QTextCharFormat all;
  all.setBackground(dark ? QColor(0x6b, 0x5a, 0x12) : QColor(0xff, 0xf0, 0x8a));
  all.setForeground(pal.color(QPalette::Text));
  const int n = static_cast<int>(m_matches.size());
  // Around the current match first, so its neighbours are lit even past the cap.
  const int from = std::max(0, std::min(m_current, n) - kMaxHighlights / 2);
  for (int i = from; i < n && marks.size() < kMaxHighlights; ++i) marks.append({m_matches[i], all});
  m_log->setExtraSelections(marks);
  m_count->setText(countText());
}

QString LogFind::countText() const {
  if (m_query.isEmpty()) return {};
  if (m_matches.isEmpty()) return tr("no match");
  return tr("%1 of %2").arg(m_current + 1).arg(m_matches.size());
}

QString LogFind::currentLine() const {
  if (m_current < 0 || m_current >= m_matches.size()) return {};
  return m_matches[m_current].block().text();
}

}  // namespace flotilla::ui
