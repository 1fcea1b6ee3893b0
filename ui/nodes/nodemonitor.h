// Live monitoring of the store's SSH nodes: probes each node every few seconds over libssh on a
// private thread pool and reports a NodeStatus per node; GPU readings go to the store's system
// samples.
//
// Decision: one Session per node, kept connected between probes (a probe is then one exec plus
// three pings, not a key exchange), used by at most one pool thread at a time (a node with a
// probe in flight is skipped by the next tick). Every libssh call, including the last
// disconnect, happens on a pool thread: a session that is dropped is handed to the pool to die.
// Results return through queued calls on this object, so a destroyed monitor receives nothing.
// There is no passphrase prompt here: encrypted keys without ssh-agent report AuthFailed.
#pragma once

#include <QHash>
#include <QObject>
#include <QString>
#include <QThreadPool>
#include <QTimer>
#include <atomic>
#include <memory>
#include <vector>

#include "db/nodes.h"
#include "ui/nodes/nodestatus.h"

namespace flotilla::ui {

class NodeMonitor : public QObject {
  Q_OBJECT

 public:
  explicit NodeMonitor(QObject* parent = nullptr);
  ~NodeMonitor() override;

  // Where samples are written and which known_hosts file is used ("" = none: nothing probes).
  void setDatabasePath(const QString& path);
  // The nodes to watch; a node whose address, user or key changed gets a new session.
  void setNodes(const std::vector<db::SshNode>& nodes);
  void setInterval(int ms);
  int interval() const { return m_timer.interval(); }

  // Probes every node now and then every interval() ms, until stop().
  void start();
  void stop();
  bool isActive() const { return m_timer.isActive(); }
  // One probe of `name` now (no-op while one is in flight).
  void probeNow(const QString& name);
  // Accepts `fingerprint` for `name` (Session::trust: only the key the node presents now, only
  // for an unknown host), then probes it. Reports trustFinished.
  void trust(const QString& name, const QString& fingerprint);
  // Probes in flight (tests wait for 0).
  int busy() const { return static_cast<int>(m_inFlight.size()); }

  // Measures the latency matrix of `nodes` on this monitor's pool (runs/latency_job.h: connect, deploy
  // `workerPath`, measure, store) with sessions of its own; reports latencyMeasured. False (and
  // nothing started) while a measurement is in flight or without a database.
  bool measureLatency(const std::vector<db::SshNode>& nodes, const QString& workerPath);
  bool measuringLatency() const { return m_measuring; }
  // Measures the link matrix of stored nodes `names` on this monitor's pool (runs/link_job.h: connect,
  // deploy `workerPath`, start the worker's `links` on every node as one process group, store it),
  // bounded by `timeoutS`; reports linksMeasured. False (and nothing started) while a link measurement
  // is in flight or without a database.
  bool measureLinks(const QStringList& names, const QString& workerPath, double timeoutS = 60);
  bool measuringLinks() const { return m_measuringLinks; }

  struct Slot;  // one node's session (defined in the .cpp)

 signals:
  void statusChanged(const QString& name, const flotilla::ui::NodeStatus& status);
  void trustFinished(const QString& name, bool ok, const QString& message);
  // A probe wrote GPU samples for `name` to the store.
  void samplesWritten(const QString& name);
  // A latency measurement ended: `stored` links were written; `problems` says what failed ("" if none).
  void latencyMeasured(int stored, const QString& problems);
  // A link measurement ended: stored as `measurementId` (0: nothing measured); `problems` one per line.
  void linksMeasured(qint64 measurementId, const QString& problems);

 private:
  void probeAll();
  void dispatch(const QString& name, const QString& trustFingerprint);
  // `serial` identifies the slot probed: the result of a slot since replaced is dropped.
  void finished(const QString& name, quint64 serial, const NodeStatus& status, bool wroteSamples);
  void retire(std::shared_ptr<Slot> slot);

  QString m_databasePath;
  QHash<QString, std::shared_ptr<Slot>> m_slots;
  QHash<QString, bool> m_inFlight;
  QHash<QString, QString> m_pendingTrust;
  quint64 m_slotSerial = 0;
  bool m_measuring = false;
  bool m_measuringLinks = false;
  std::shared_ptr<std::atomic<bool>> m_cancel = std::make_shared<std::atomic<bool>>(false);
  QTimer m_timer;
  QThreadPool m_pool;
};

}  // namespace flotilla::ui
