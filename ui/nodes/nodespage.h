// The Nodes page: the machines runs can use. A table with "This machine" first and then every
// SSH node of the workspace's store, with live status, GPU bars and latency; Add/Edit/Remove;
// the host key prompt for unknown nodes; the reachability matrix between the nodes (latencyview.h),
// the link matrix on the collective path with its heat map (linksview.h, "Measure links"); and
// the details of this machine's own probe below.
//
// Decision: the page watches nodes only while it is visible (showEvent starts the NodeMonitor,
// hideEvent stops it), and it does no I/O itself: the store is read and written by QtConcurrent
// jobs and SSH happens on the monitor's pool. Without a database path (setDatabasePath not
// called, or the workspace has none) the page shows this machine only.
#pragma once

#include <QSet>
#include <QStringList>
#include <QWidget>
#include <functional>

class QFormLayout;
class QLabel;
class QPushButton;
class QTableView;

namespace flotilla::ui {

class HostKeyDialog;
class LatencyView;
class LinksView;
class MachineProbe;
class NodeMonitor;
class NodesModel;
struct NodeStatus;

class NodesPage : public QWidget {
  Q_OBJECT

 public:
  explicit NodesPage(MachineProbe* probe, QWidget* parent = nullptr);

  // The workspace's run database: nodes are read from it and samples written to it; the
  // known_hosts file beside it is the one `flotilla nodes trust` uses.
  void setDatabasePath(const QString& path);
  QString databasePath() const { return m_databasePath; }

  // The text of the "This machine" card, one "label: value" line per fact (tests read it).
  QString localMachineText() const;

  NodesModel* model() const { return m_model; }
  NodeMonitor* monitor() const { return m_monitor; }
  QTableView* table() const { return m_table; }
  // The host key prompt now open (nullptr when none).
  HostKeyDialog* hostKeyDialog() const { return m_hostKeyDialog; }
  QString messageText() const;
  // "box is unreachable: Failed to resolve hostname ...", one line per node that cannot be used; "" none.
  QString problemsText() const;
  LatencyView* latencyView() const { return m_latency; }
  LinksView* linksView() const { return m_links; }
  // The local flotilla-worker that "Measure latency" deploys (default: beside the app, or on PATH).
  void setWorkerPath(const QString& path) { m_workerPath = path; }

  // Opens the dialogs (also wired to the buttons); public for tests.
  void addNode();
  void editSelected();
  void removeSelected();
  void trustSelected();
  // Measures the latency matrix of the selected nodes (two or more), else of every node, on the
  // monitor's pool; the matrix is re-read from the store when it ends.
  void measureLatency();
  // Measures the link matrix (runs/link_job.h) of the selected nodes (two or more), else of every
  // node, on the monitor's pool; the newest measurement is re-read from the store when it ends.
  void measureLinks();
  // The bound of one link measurement (connect, deploy, measure), seconds.
  void setLinksTimeout(double seconds) { m_linksTimeout = seconds; }
  // Re-reads the nodes from the store (asynchronously); emits nodesReloaded.
  void reload();

 signals:
  void nodesReloaded();

 protected:
  void showEvent(QShowEvent* event) override;
  void hideEvent(QHideEvent* event) override;

 private:
  void showProbe();
  void onStatus(const QString& name, const NodeStatus& status);
  void promptHostKey(const QString& name, const QString& fingerprint);
  QString selectedName() const;
  QStringList selectedNames() const;
  QString workerPath() const;
  void updateActions();
  void setMessage(const QString& text);
  // Runs `job` (a store write) on the thread pool, then shows `done` or the error, and reloads.
  void runStoreJob(std::function<QString()> job);

  MachineProbe* m_probe;
  NodesModel* m_model;
  NodeMonitor* m_monitor;
  QString m_databasePath;
  QTableView* m_table;
  LatencyView* m_latency;
  LinksView* m_links;
  double m_linksTimeout = 60;
  QString m_workerPath;
  QFormLayout* m_facts;
  QLabel* m_status;
  QLabel* m_message;
  QLabel* m_emptyHint;
  QLabel* m_problems = nullptr;
  QPushButton* m_refresh;
  QPushButton* m_add;
  QPushButton* m_edit;
  QPushButton* m_remove;
  QPushButton* m_trust;
  QPushButton* m_probeNow;
  HostKeyDialog* m_hostKeyDialog = nullptr;
  QSet<QString> m_prompted;  // "name fingerprint" already asked about in this session
  quint64 m_reloadSerial = 0;
};

}  // namespace flotilla::ui
