// The Runs table: one row per run launched in this session, over the LocalRuns service.
//
// Decision: the model keeps its own row count and follows runAdded with begin/endInsertRows, so
// views and QAbstractItemModelTester see a consistent count even though the service appends
// first and tells afterwards. Rows are only ever appended during a session.
#pragma once

#include <QAbstractTableModel>

class QTimer;

namespace flotilla::ui {

class ServiceRun;
class LocalRuns;

class LocalRunsModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { Name, Status, Progress, Loss, ValLoss, TokensPerSec, Elapsed, ColumnCount };
  // Qt::UserRole: the row's ServiceRun* (as a QObject*).
  static constexpr int RunRole = Qt::UserRole;

  explicit LocalRunsModel(LocalRuns* runs, QObject* parent = nullptr);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

  ServiceRun* runAt(int row) const;

 private:
  QVariant display(const ServiceRun* run, int column) const;
  void tickElapsed();

  LocalRuns* m_runs;
  int m_rows = 0;
  QTimer* m_elapsedTimer;
};

// "1:05", "1:02:03"
QString formatDuration(qint64 ms);

}  // namespace flotilla::ui
