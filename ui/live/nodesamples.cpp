// Node GPU readings for the Live page (see nodesamples.h).
#include "ui/live/nodesamples.h"

#include <QtConcurrent/QtConcurrentRun>

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>

#include "db/clusters.h"
#include "db/costs.h"
#include "db/database.h"
#include "db/nodes.h"
#include "db/run_store.h"

namespace flotilla::ui {
namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Appends reading `s` (a db::SystemSample or db::JobGpuSample) of `node` unless `cursor` says it
// was delivered before; moves the cursor.
template <typename Sample>
void deliver(const QString& node, const Sample& s, NodeSampleCursor& cursor, QVector<NodeGpuSample>& out) {
  if (s.time < cursor.time || (s.time == cursor.time && cursor.devices.contains(s.device))) return;
  if (s.time > cursor.time) {
    cursor.time = s.time;
    cursor.devices.clear();
  }
  cursor.devices.insert(s.device);
  NodeGpuSample g;
  g.node = node;
  g.device = s.device;
  g.time = s.time;
  g.utilPct = s.utilization.value_or(kNaN);
  g.memUsed = s.memory_used ? double(*s.memory_used) : kNaN;
  g.memTotal = s.memory_total ? double(*s.memory_total) : kNaN;
  out.append(g);
}
}  // namespace

NodeSampleBatch readNodeSamples(const QString& databasePath, qint64 runId,
                                QHash<qint64, NodeSampleCursor> cursors,
                                QHash<QString, NodeSampleCursor> jobCursors) {
  NodeSampleBatch out;
  out.runId = runId;
  try {
    db::OpenOptions options;
    options.create = false;
    options.quick_check = false;
    const db::Database db(databasePath.toStdString(), options);
    {
      const db::Run run = db::get_run(db, static_cast<int64_t>(runId));
      out.startedAt = run.started_at.value_or(run.created_at);
      out.cost.known = true;
      out.cost.usdPerHour = run.usd_per_hour.value_or(0);
      out.cost.source = QString::fromStdString(run.price_source);
      out.cost.maxUsd = run.budget_usd.value_or(0);
      out.cost.accruals = db::run_accruals(db, run.id);
      // A run stored before prices were (schema < 7) is priced by its accruals' rates.
      if (!run.usd_per_hour)
        for (const auto& a : out.cost.accruals)
          if (!a.end) out.cost.usdPerHour += a.usd_per_hour;
      out.cost.spentKnown = true;
      out.cost.spentUsd = db::accrued_until(out.cost.accruals, 0, true);  // 0: now, by the monotonic clock
    }
    for (const db::RunNodeRef& node : db::list_run_nodes(db, runId)) {
      const QString name = QString::fromStdString(node.name);
      out.nodes << name;
      if (node.kind == "ssh") out.sshNodes << name;
      NodeSampleCursor& cursor = cursors[node.node_id];
      const double since = cursor.time > 0 ? cursor.time : out.startedAt;
      for (const db::SystemSample& s : db::system_samples(db, node.node_id, since))
        deliver(name, s, cursor, out.samples);
    }
    // A Slurm run's nodes are Slurm's: their readings are the run's own, by node name.
    double since = jobCursors.isEmpty() ? out.startedAt : std::numeric_limits<double>::infinity();
    for (const NodeSampleCursor& c : std::as_const(jobCursors)) since = std::min(since, c.time);
    for (const db::JobGpuSample& s : db::job_samples(db, runId, since)) {
      const QString name = QString::fromStdString(s.node);
      if (!out.nodes.contains(name)) {
        out.nodes << name;
        out.sshNodes << name;
      }
      deliver(name, s, jobCursors[name], out.samples);
    }
  } catch (const std::exception& e) {
    out.error = QString::fromUtf8(e.what());
  }
  out.cursors = std::move(cursors);
  out.jobCursors = std::move(jobCursors);
  return out;
}

NodeSamplesPoller::NodeSamplesPoller(QObject* parent) : QObject(parent) {
  connect(&m_watcher, &QFutureWatcher<NodeSampleBatch>::finished, this, &NodeSamplesPoller::finished);
}

NodeSamplesPoller::~NodeSamplesPoller() { m_watcher.waitForFinished(); }

void NodeSamplesPoller::follow(qint64 runId) {
  m_runId = runId;
  ++m_generation;
  m_cursors.clear();
  m_jobCursors.clear();
  m_nodes.clear();
}

bool NodeSamplesPoller::poll() {
  if (m_busy || m_runId <= 0 || m_path.isEmpty()) return false;
  m_busy = true;
  const quint64 generation = m_generation;
  m_watcher.setFuture(QtConcurrent::run([path = m_path, id = m_runId, cursors = m_cursors,
                                          jobCursors = m_jobCursors, generation] {
    NodeSampleBatch batch = readNodeSamples(path, id, cursors, jobCursors);
    batch.generation = generation;
    return batch;
  }));
  return true;
}

void NodeSamplesPoller::finished() {
  m_busy = false;
  const NodeSampleBatch batch = m_watcher.result();
  if (batch.generation != m_generation) {  // read for a run no longer followed: read for this one
    poll();
    return;
  }
  if (batch.error.isEmpty()) {
    m_cursors = batch.cursors;
    m_jobCursors = batch.jobCursors;
    m_nodes = batch.nodes;
  }
  emit samplesRead(batch);
}

}  // namespace flotilla::ui
