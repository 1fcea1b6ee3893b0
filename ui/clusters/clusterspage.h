// The Clusters page: the Slurm clusters of the workspace (partitions, nodes idle / allocated /
// down, GPUs, prices) and our jobs on them, as their last probe and the run watchers recorded.
//
// Decision: the page reads the store in one background task per reload (asyncquery.h). "Probe"
// asks the selected cluster's login node again (runs::check_cluster, as `flotilla clusters
// probe` does, off the UI thread) and stores what it saw, so node states are current; an unknown
// login key is shown with its fingerprint and trusted only when the user says so (as `flotilla
// clusters trust`), a changed key never. Submitting goes through the runs layer (the wizard).
#pragma once

#include <QPointer>
#include <QWidget>

#include <functional>

class QLabel;
class QPushButton;
class QTableView;

namespace flotilla::runs {
struct ClusterFields;
}

namespace flotilla::ui {

class ClusterDialog;
class ClustersModel;

class ClustersPage : public QWidget {
  Q_OBJECT

 public:
  explicit ClustersPage(const QString& databasePath, QWidget* parent = nullptr);

  ClustersModel* model() const { return m_model; }
  QTableView* view() const { return m_view; }
  bool busy() const { return m_loading || m_probing; }
  QPushButton* probeButton() const { return m_probe; }
  QPushButton* addButton() const { return m_add; }
  ClusterDialog* addDialog() const;  // the open Add cluster dialog, if any
  QString statusText() const;
  // How an unknown login key is confirmed (cluster, "SHA256:..."); default: a question box.
  void setConfirmTrust(std::function<bool(const QString&, const QString&)> confirm) {
    m_confirmTrust = std::move(confirm);
  }

 public slots:
  void reload();
  // Probes the selected cluster (the only one, when one is stored and none is selected).
  void probeSelected();
  // Opens the Add cluster dialog; OK stores the cluster (runs::add_cluster) and probes it.
  void addCluster();

 signals:
  void loaded();
  void probed(bool ok);
  void added(bool ok);  // an Add cluster… was stored (true) or refused (the status says why)

 protected:
  void showEvent(QShowEvent* event) override;

 private:
  QString m_databasePath;
  ClustersModel* m_model;
  QTableView* m_view;
  void probe(const QString& cluster, const QString& trustFingerprint);
  void store(const runs::ClusterFields& fields);
  void updateActions();

  QLabel* m_status;
  QPushButton* m_probe;
  QPushButton* m_add = nullptr;
  QPointer<ClusterDialog> m_dialog;
  bool m_loading = false, m_probing = false;
  std::function<bool(const QString&, const QString&)> m_confirmTrust;
};

}  // namespace flotilla::ui
