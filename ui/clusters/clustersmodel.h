// The Clusters table: every Slurm cluster of the store with what its last probe saw (Slurm
// version, nodes idle / allocated / down, GPUs, partitions and their prices) and our jobs on it.
//
// Decision: rows are plain values read from the store by loadClusterRows() (off the UI thread; see
// ClustersPage); the model never opens the database or a connection.
#pragma once

#include <QAbstractTableModel>
#include <QString>
#include <vector>

namespace flotilla::ui {

struct ClusterRow {
  QString name, login, version;
  int nodes = 0, idle = 0, allocated = 0, down = 0, gpus = 0;
  QString partitions;  // "cpu (default, up, 02:00:00, $0.05/CPU-h), short (up, 00:10:00, unpriced)"
  QString accounting;  // "on" / "off: <why>"
  int jobsActive = 0;  // our runs on it that are queued or running
  QString jobs;        // "run-a RUNNING (job 12), run-b PENDING: waiting for free nodes (job 13)"
  bool probed = false;
};

// Reads every cluster, its probe, prices and our jobs from the store at `databasePath`.
std::vector<ClusterRow> loadClusterRows(const QString& databasePath);

class ClustersModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { Name, Login, Slurm, Nodes, Gpus, Partitions, Jobs, ColumnCount };

  explicit ClustersModel(QObject* parent = nullptr);
  void setRows(std::vector<ClusterRow> rows);
  const ClusterRow& row(int r) const { return m_rows[static_cast<size_t>(r)]; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  std::vector<ClusterRow> m_rows;
};

}  // namespace flotilla::ui
