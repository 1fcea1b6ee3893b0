// The selected entry's decision in full: the scheduler's words, then every place it weighed with
// its predicted speed and what that rests on, its wait, predicted time and cost, and why not.
//
// Decision: read straight from the decision JSON the scheduler stored on the entry
// (queue_entries.decision, docs/scheduling.md), so the page shows exactly what was decided, with
// every predicted figure labelled predicted; unknown fields are ignored and a missing one shows "-".
#pragma once

#include <QWidget>

#include "db/queue.h"

class QLabel;
class QTableWidget;

namespace flotilla::ui {

class DecisionView : public QWidget {
  Q_OBJECT

 public:
  explicit DecisionView(QWidget* parent = nullptr);

  // nullptr: nothing selected.
  void setEntry(const db::QueueEntry* entry);
  QTableWidget* places() const { return m_places; }
  QString wordsText() const;
  // Every cell of the places table, row by row (tests, accessibility).
  QString placesText() const;

  // "3 h 10 min", "45 min", "30 s"; from two days "4 d 19 h".
  static QString durationText(double seconds);

 private:
  QLabel* m_words;
  QTableWidget* m_places;
};

}  // namespace flotilla::ui
