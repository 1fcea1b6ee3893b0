// The Runs table over the run store: one row per stored run, updated from StoreService snapshots
// (taken off the UI thread), and a filter proxy for status, text and tag.
//
// Decision: a snapshot is merged into the rows by run id, not reset: changed rows emit
// dataChanged, new runs are inserted and deleted ones removed with the proper begin/end calls, so
// selection, scroll position and an open editor survive the once-a-second refresh.
#pragma once

#include <QAbstractTableModel>
#include <QSortFilterProxyModel>
#include <QVector>

#include "ui/runs/runsnapshot.h"

namespace flotilla::ui {

class StoreService;

class StoreRunsModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column {
    Name,
    Status,
    Target,
    ModelSize,
    Layout,
    Progress,
    Loss,
    TokensPerSec,
    Mfu,
    Elapsed,  // "Running time": what the price is charged for (db::RunSummary::running_s)
    Cost,
    Tags,
    Notes,
    Created,  // when the run was made; the table's default order (newest first)
    ColumnCount
  };
  static constexpr int IdRole = Qt::UserRole;          // qint64 run id
  static constexpr int StatusRole = Qt::UserRole + 1;  // the store's status name
  static constexpr int TagsRole = Qt::UserRole + 2;    // QStringList
  static constexpr int SortRole = Qt::UserRole + 3;    // a number or text to sort by
  static constexpr int CheckpointsRole = Qt::UserRole + 4;  // qint64 committed checkpoints stored

  // store may be nullptr (tests feed setRows directly).
  explicit StoreRunsModel(StoreService* store, QObject* parent = nullptr);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;
  Qt::ItemFlags flags(const QModelIndex& index) const override;
  // Tags (comma-separated) and notes are edited in place and written to the store.
  bool setData(const QModelIndex& index, const QVariant& value, int role = Qt::EditRole) override;

  // Merges a snapshot (newest first) into the rows by id.
  void setRows(const QVector<RunRow>& rows);
  const RunRow* rowAt(int row) const;
  int rowOfId(qint64 id) const;
  // Unix seconds used for the Elapsed column of running runs (tests pin it); 0: the clock.
  void setNow(double now) { m_now = now; }

 private:
  QVariant display(const RunRow& r, int column) const;
  double now() const;
  double runningSeconds(const RunRow& r) const;  // as of now: a running run's goes on from readAt

  StoreService* m_store;
  QVector<RunRow> m_rows;
  double m_now = 0;
};

class RunsFilterModel : public QSortFilterProxyModel {
  Q_OBJECT

 public:
  explicit RunsFilterModel(QObject* parent = nullptr);
  void setStatusFilter(const QString& status);  // "" = any
  void setTextFilter(const QString& text);      // name, target, notes contain it
  void setTagFilter(const QString& tag);        // "" = any

 protected:
  bool filterAcceptsRow(int sourceRow, const QModelIndex& sourceParent) const override;

 private:
  QString m_status, m_text, m_tag;
};

}  // namespace flotilla::ui
