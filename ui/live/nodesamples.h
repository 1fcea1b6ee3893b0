// GPU readings of a followed run's nodes, read from the run store's system_samples (which the
// node monitor fills every few seconds while a run is watched) or, for a Slurm run, from
// slurm_job_samples (srun --overlap into the job's allocation), for the Live page's GPU plot, and
// the run's stored price, cap and accruals for its spend.
//
// Decision: the page asks, the store answers off the UI thread. poll() starts one read on the
// thread pool (a short-lived read-only connection: a few indexed queries), never two at once;
// the result comes back as a queued signal carrying only readings newer than the previous
// answer's, so a 2 s poll costs the rows that arrived since. Each node keeps a cursor (the
// newest time seen and the devices already read at that time), so a reading committed late
// at the same timestamp is still delivered once. follow() starts over (a new generation):
// an answer of an older generation is dropped.
#pragma once

#include <QFutureWatcher>
#include <QHash>
#include <QObject>
#include <QSet>
#include <QString>
#include <QStringList>
#include <QVector>

#include "ui/live/livedata.h"

namespace flotilla::ui {

struct NodeSampleCursor {
  double time = 0;    // newest reading delivered
  QSet<int> devices;  // devices delivered at `time`
};

struct NodeSampleBatch {
  quint64 generation = 0;
  qint64 runId = 0;
  double startedAt = 0;  // the run's start (or creation) time, Unix seconds
  QStringList nodes;     // the run's nodes (run_nodes, by id; a Slurm run's: as its readings name them)
  QStringList sshNodes;  // those of them reached over SSH, or a Slurm run's nodes
  QVector<NodeGpuSample> samples;
  RunCost cost;                             // the run's stored price, cap and accruals (what it has spent)
  QHash<qint64, NodeSampleCursor> cursors;  // after this batch
  QHash<QString, NodeSampleCursor> jobCursors;  // a Slurm run's, by Slurm node name
  QString error;                            // the store could not be read (the page keeps what it has)
};

// The readings of run `runId`'s nodes after `cursors` (all since the run started when a node
// has none). Runs on any thread; never throws.
NodeSampleBatch readNodeSamples(const QString& databasePath, qint64 runId,
                                QHash<qint64, NodeSampleCursor> cursors,
                                QHash<QString, NodeSampleCursor> jobCursors = {});

class NodeSamplesPoller : public QObject {
  Q_OBJECT

 public:
  explicit NodeSamplesPoller(QObject* parent = nullptr);
  ~NodeSamplesPoller() override;

  void setDatabasePath(const QString& path) { m_path = path; }
  QString databasePath() const { return m_path; }
  // Starts over for stored run `runId` (0: none; poll() then does nothing).
  void follow(qint64 runId);
  qint64 runId() const { return m_runId; }
  // Starts a read unless one is running or there is nothing to read; returns whether it did.
  bool poll();
  bool busy() const { return m_busy; }
  // The run's nodes as of the last answer.
  const QStringList& nodes() const { return m_nodes; }

 signals:
  // Readings newer than the previous answer's (possibly none), oldest first per node.
  void samplesRead(const flotilla::ui::NodeSampleBatch& batch);

 private:
  void finished();

  QString m_path;
  qint64 m_runId = 0;
  quint64 m_generation = 0;
  bool m_busy = false;
  QHash<qint64, NodeSampleCursor> m_cursors;
  QHash<QString, NodeSampleCursor> m_jobCursors;
  QStringList m_nodes;
  QFutureWatcher<NodeSampleBatch> m_watcher;
};

}  // namespace flotilla::ui
