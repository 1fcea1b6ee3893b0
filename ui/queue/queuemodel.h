// The queue's entries as a table: id, name, state, place, priority, deadline, max $ and why it
// waits (or how it ended), in the scheduler's order with finished entries last.
//
// Decision: a refresh with the same entries in the same order only changes cells (dataChanged), so
// the selection and the scroll position survive the Queue page's one-second poll; another order
// resets the model and the page selects the same entry id again.
#pragma once

#include <QAbstractTableModel>

#include <vector>

#include "db/queue.h"

namespace flotilla::ui {

class QueueModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { Id, Name, State, Place, Priority, Deadline, MaxUsd, Why, ColumnCount };

  explicit QueueModel(QObject* parent = nullptr);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

  void setEntries(std::vector<db::QueueEntry> entries);
  const db::QueueEntry* entry(int row) const;
  int rowOf(qint64 id) const;  // -1 when absent

  // "queued", "paused", ... as the page shows them; "any place" for no place key.
  static QString stateText(db::EntryState state);
  static QString placeText(const db::QueueEntry& entry);

 private:
  std::vector<db::QueueEntry> m_entries;
};

}  // namespace flotilla::ui
