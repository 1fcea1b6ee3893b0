// The Clusters page: the Slurm clusters of the workspace (partitions, nodes idle / allocated /
// down, GPUs, prices) and our jobs on them, as their last probe and the run watchers recorded.
//
// Decision: the page reads the store only, in one background task per reload (asyncquery.h); it
// never connects to a cluster itself. Probing and submitting go through the runs layer
// (`flotilla clusters probe`, `flotilla run --cluster`), which write what this page shows.
#pragma once

#include <QWidget>

class QLabel;
class QTableView;

namespace flotilla::ui {

class ClustersModel;

class ClustersPage : public QWidget {
  Q_OBJECT

 public:
  explicit ClustersPage(const QString& databasePath, QWidget* parent = nullptr);

  ClustersModel* model() const { return m_model; }
  QTableView* view() const { return m_view; }
  bool busy() const { return m_loading; }

 public slots:
  void reload();

 signals:
  void loaded();

 protected:
  void showEvent(QShowEvent* event) override;

 private:
  QString m_databasePath;
  ClustersModel* m_model;
  QTableView* m_view;
  QLabel* m_status;
  bool m_loading = false;
};

}  // namespace flotilla::ui
