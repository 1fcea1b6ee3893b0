// Node monitoring on a private thread pool (see nodemonitor.h).
#include "ui/nodes/nodemonitor.h"

#include <QCoreApplication>

#include "db/database.h"
#include "db/errors.h"
#include "runs/link_job.h"
#include "runs/node_admin.h"
#include "runs/node_bridge.h"
#include "runs/node_ops.h"
#include "runs/ssh_options.h"

namespace flotilla::ui {

QString stateText(NodeState state) {
  switch (state) {
    case NodeState::Unknown:
      return QCoreApplication::translate("NodeMonitor", "not probed");
    case NodeState::Reachable:
      return QCoreApplication::translate("NodeMonitor", "reachable");
    case NodeState::Unreachable:
      return QCoreApplication::translate("NodeMonitor", "unreachable");
    case NodeState::UnknownHostKey:
      return QCoreApplication::translate("NodeMonitor", "unknown host key");
    case NodeState::HostKeyChanged:
      return QCoreApplication::translate("NodeMonitor", "host key changed");
    case NodeState::AuthFailed:
      return QCoreApplication::translate("NodeMonitor", "authentication failed");
  }
  return {};
}

// One node's connection; touched by one pool thread at a time (m_inFlight guards it).
struct NodeMonitor::Slot {
  quint64 serial = 0;  // unique per monitor: tells a replaced slot's late result apart
  db::SshNode node;
  std::unique_ptr<runs::NodeProber> prober;  // its connection, kept between probes
};

namespace {

// How the app reaches a stored node: the one set of SSH options (runs/ssh_options.h), no
// passphrase prompt (an encrypted key is skipped; ssh-agent still works).
runs::SshAccess accessFor(const std::string& databasePath) {
  runs::SshAccess access;
  access.database_path = databasePath;
  return access;
}

bool sameTarget(const db::SshNode& a, const db::SshNode& b) {
  return a.host == b.host && a.port == b.port && a.user == b.user && a.key_path == b.key_path;
}

db::OpenOptions existingStore() {
  db::OpenOptions o;
  o.create = false;
  o.quick_check = false;
  return o;
}

// Writes one reading per GPU and the node's GPU type/count; false when the store refused.
bool writeSamples(const std::string& dbPath, const db::SshNode& node,
                  const std::vector<runs::GpuInfo>& gpus) {
  try {
    db::Database db(dbPath, existingStore());
    const double now = db::now_seconds();
    const std::vector<db::SystemSample> samples = runs::samples_from_gpus(node.id, gpus, now);
    if (!samples.empty()) db::insert_system_samples(db, samples);
    const std::string type = gpus.empty() ? "" : gpus[0].name;
    if (type != node.gpu_type || static_cast<int64_t>(gpus.size()) != node.gpu_count)
      db::set_node_gpus(db, node.id, type, static_cast<int64_t>(gpus.size()));
    return true;
  } catch (const db::DbError&) {
    return false;  // the node was removed meanwhile, or the store is busy: the next probe retries
  }
}

// Connects (once), probes, measures latency. Runs on a pool thread.
NodeStatus probeSlot(NodeMonitor::Slot& slot, const std::string& trustFingerprint) {
  NodeStatus st;
  const runs::NodeProber::Result r = slot.prober->probe(trustFingerprint);
  st.fingerprint = QString::fromStdString(r.fingerprint);
  st.message = QString::fromStdString(r.message);
  switch (r.failure) {
    case runs::NodeProber::Failure::kNone:
      st.latencyMs = r.latency_s * 1000;
      st.state = NodeState::Reachable;
      st.gpus = r.probe.gpus;
      st.gpuStatus = QString::fromStdString(r.probe.gpu_status);
      st.probed = true;
      st.message = QString::fromStdString(r.probe.os + ", " + std::to_string(r.probe.cpus) + " CPUs");
      break;
    case runs::NodeProber::Failure::kUnknownHostKey:
      st.state = NodeState::UnknownHostKey;
      break;
    case runs::NodeProber::Failure::kHostKeyChanged:
      st.state = NodeState::HostKeyChanged;
      break;
    case runs::NodeProber::Failure::kAuth:
      st.state = NodeState::AuthFailed;
      break;
    case runs::NodeProber::Failure::kUnreachable:
      st.state = NodeState::Unreachable;
      break;
  }
  return st;
}

}  // namespace

NodeMonitor::NodeMonitor(QObject* parent) : QObject(parent) {
  qRegisterMetaType<flotilla::ui::NodeStatus>();
  m_pool.setMaxThreadCount(4);
  m_timer.setInterval(5000);
  connect(&m_timer, &QTimer::timeout, this, &NodeMonitor::probeAll);
}

NodeMonitor::~NodeMonitor() {
  m_cancel->store(true);  // a latency measurement stops between nodes
  m_timer.stop();
  m_pool.clear();
  for (auto& slot : m_slots) retire(std::move(slot));
  m_slots.clear();
  m_pool.waitForDone();  // at most one connect/read timeout
}

void NodeMonitor::retire(std::shared_ptr<Slot> slot) {
  if (!slot) return;
  m_pool.start([s = std::move(slot)]() mutable { s.reset(); });  // the disconnect happens here
}

void NodeMonitor::setDatabasePath(const QString& path) {
  if (path == m_databasePath) return;
  m_databasePath = path;
  for (auto& slot : m_slots) retire(std::move(slot));
  m_slots.clear();
}

void NodeMonitor::setNodes(const std::vector<db::SshNode>& nodes) {
  QHash<QString, std::shared_ptr<Slot>> next;
  for (const auto& n : nodes) {
    const QString name = QString::fromStdString(n.name);
    auto old = m_slots.take(name);
    if (old && sameTarget(old->node, n) && !m_inFlight.contains(name)) {
      old->node = n;  // price, labels, GPU count: no reconnect needed
      next.insert(name, std::move(old));
      continue;
    }
    retire(std::move(old));
    auto slot = std::make_shared<Slot>();
    slot->serial = ++m_slotSerial;
    slot->node = n;
    slot->prober = std::make_unique<runs::NodeProber>(accessFor(m_databasePath.toStdString()), n);
    next.insert(name, std::move(slot));
  }
  for (auto& gone : m_slots) retire(std::move(gone));
  m_slots = std::move(next);
}

void NodeMonitor::setInterval(int ms) { m_timer.setInterval(ms); }

void NodeMonitor::start() {
  if (!m_timer.isActive()) m_timer.start();
  probeAll();
}

void NodeMonitor::stop() { m_timer.stop(); }

void NodeMonitor::probeAll() {
  for (auto it = m_slots.cbegin(); it != m_slots.cend(); ++it) dispatch(it.key(), QString());
}

void NodeMonitor::probeNow(const QString& name) { dispatch(name, QString()); }

void NodeMonitor::trust(const QString& name, const QString& fingerprint) {
  if (m_inFlight.contains(name)) {
    m_pendingTrust.insert(name, fingerprint);  // sent when the probe in flight returns
    return;
  }
  dispatch(name, fingerprint);
}

void NodeMonitor::dispatch(const QString& name, const QString& trustFingerprint) {
  if (m_databasePath.isEmpty() || m_inFlight.contains(name)) return;
  std::shared_ptr<Slot> slot = m_slots.value(name);
  if (!slot) return;
  m_inFlight.insert(name, true);
  const std::string dbPath = m_databasePath.toStdString();
  const std::string fp = trustFingerprint.toStdString();
  m_pool.start([this, slot, name, dbPath, fp] {
    const NodeStatus st = probeSlot(*slot, fp);
    const bool wrote = st.probed && writeSamples(dbPath, slot->node, st.gpus);
    if (!fp.empty()) {
      // Trusted once the key check passed (authentication may still fail: another problem).
      const bool ok = st.state == NodeState::Reachable || st.state == NodeState::AuthFailed;
      const QString msg = ok ? QString() : st.message;
      QMetaObject::invokeMethod(
          this, [this, name, ok, msg] { emit trustFinished(name, ok, msg); }, Qt::QueuedConnection);
    }
    // The slot's serial, not the slot: the last reference must die here, on the pool.
    QMetaObject::invokeMethod(
        this, [this, name, serial = slot->serial, st, wrote] { finished(name, serial, st, wrote); },
        Qt::QueuedConnection);
  });
}

void NodeMonitor::finished(const QString& name, quint64 serial, const NodeStatus& status, bool wroteSamples) {
  m_inFlight.remove(name);
  const std::shared_ptr<Slot> slot = m_slots.value(name);
  if (!slot) return;  // removed meanwhile
  if (slot->serial != serial) {
    // Replaced meanwhile (another address, user or key): the result describes the old target.
    // Probe the new one now; a trust waiting goes with it (Session::trust checks the key again).
    if (m_timer.isActive() || m_pendingTrust.contains(name)) dispatch(name, m_pendingTrust.take(name));
    return;
  }
  emit statusChanged(name, status);
  if (wroteSamples) emit samplesWritten(name);
  if (m_pendingTrust.contains(name)) dispatch(name, m_pendingTrust.take(name));
}

bool NodeMonitor::measureLatency(const std::vector<db::SshNode>& nodes, const QString& workerPath) {
  if (m_measuring || m_databasePath.isEmpty()) return false;
  m_measuring = true;
  m_pool.start([this, nodes, dbPath = m_databasePath.toStdString(), worker = workerPath.toStdString(),
                cancel = m_cancel] {
    std::vector<std::string> names;
    for (const auto& n : nodes) names.push_back(n.name);
    const runs::LatencyJobResult r = runs::measure_node_latency(accessFor(dbPath), names, worker, *cancel);
    QStringList problems;
    for (const auto& p : r.problems) problems << QString::fromStdString(p);
    QMetaObject::invokeMethod(
        this,
        [this, stored = static_cast<int>(r.rows.size()), text = problems.join(QLatin1Char('\n'))] {
          m_measuring = false;
          emit latencyMeasured(stored, text);
        },
        Qt::QueuedConnection);
  });
  return true;
}

bool NodeMonitor::measureLinks(const QStringList& names, const QString& workerPath, double timeoutS) {
  if (m_measuringLinks || m_databasePath.isEmpty()) return false;
  m_measuringLinks = true;
  std::vector<std::string> nodes;
  for (const QString& n : names) nodes.push_back(n.toStdString());
  m_pool.start([this, nodes, dbPath = m_databasePath.toStdString(), worker = workerPath.toStdString(),
                cancel = m_cancel, timeoutS] {
    const runs::SshAccess access = accessFor(dbPath);
    runs::LinkJobOptions job;
    job.timeout_s = timeoutS;
    QStringList problems;
    qint64 id = 0;
    try {
      const runs::LinkJobResult r = runs::run_link_job(
          dbPath, nodes, worker,
          [access](const db::SshNode& n) { return runs::ssh_session_options(access, n); }, *cancel, job);
      if (r.measurement) id = r.measurement->id;
      for (const auto& p : r.problems) problems << QString::fromStdString(p);
    } catch (const std::exception& e) {  // the store, not a node: said, never thrown at the page
      problems << QString::fromUtf8(e.what());
    }
    QMetaObject::invokeMethod(
        this,
        [this, id, text = problems.join(QLatin1Char('\n'))] {
          m_measuringLinks = false;
          emit linksMeasured(id, text);
        },
        Qt::QueuedConnection);
  });
  return true;
}

}  // namespace flotilla::ui
