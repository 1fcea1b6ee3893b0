// The app's run store service: the db Writer (its own thread), which every run watcher of the
// session writes through (runs/local_run.h), and the snapshot poller (its own thread, its own read
// connection), behind one QObject whose signals arrive on the UI thread.
//
// Decision: the UI thread never waits on the disk for metrics: they are stored by each run's
// watcher on its own thread. The only synchronous calls are the small reads and the edits behind
// explicit user actions (tags, notes, delete), each one small transaction on the writer's queue.
// Statuses are never written here: that is the runs layer's (runs/run_status.h). Results come back
// as queued signals (STYLE.md principle 7); shutdown is stop polling, drain, join.
#pragma once

#include <QObject>
#include <QString>
#include <QStringList>
#include <QThread>
#include <QVector>

#include <memory>
#include <optional>

#include "db/run_store.h"
#include "runs/quality.h"
#include "ui/runs/runsnapshot.h"

namespace flotilla::db {
class Writer;
}

namespace flotilla::ui {

class StorePoller;

class StoreService : public QObject {
  Q_OBJECT

 public:
  // Opens the writer on `databasePath` (throws db::DbError) and starts the threads.
  explicit StoreService(const QString& databasePath, QObject* parent = nullptr, int pollMs = 1000);
  ~StoreService() override;

  QString databasePath() const { return m_path; }
  flotilla::db::Writer& writer() { return *m_writer; }

  // A free run name based on `base` (base, base-2, ...).
  QString uniqueName(const QString& base);
  // The stored run, read on the writer's connection (small, synchronous).
  std::optional<flotilla::db::Run> run(qint64 id);
  void addEvent(qint64 id, const QString& level, const QString& message);
  // Settles the store's stale local runs (runs/stale_runs.h) on a thread of its own; each one
  // settled is reported by runEnded.
  void settleStaleRuns(const QString& origin);

  // User edits: synchronous, false with *error when the store refused.
  bool setTags(qint64 id, const QStringList& tags, QString* error = nullptr);
  bool setNotes(qint64 id, const QString& notes, QString* error = nullptr);
  // Refuses a running run; the run folder is left on disk.
  bool deleteRun(qint64 id, QString* error = nullptr);
  // An evaluation's scores stored as the run's metrics "task/<task>/<score>" at `step` (runs/quality.h
  // store_eval), so Compare and the summary see them; *names gets the metric names.
  bool storeEval(qint64 id, qint64 step, const flotilla::runs::EvalOutcome& outcome, QStringList* names,
                 QString* error = nullptr);

  // A snapshot now (it arrives through snapshotReady).
  void refresh();
  QVector<RunRow> lastSnapshot() const { return m_last; }
  double spendPerHour() const;  // sum of the running runs' $/h in the last snapshot

 signals:
  void snapshotReady(const QVector<flotilla::ui::RunRow>& rows);
  void ingested(qint64 runId, qint64 offset);
  void runEnded(qint64 runId, const QString& status);
  void storeError(const QString& message);

 private:
  QString m_path;
  std::unique_ptr<flotilla::db::Writer> m_writer;
  QThread* m_settle = nullptr;
  QThread m_pollThread;
  StorePoller* m_poller = nullptr;
  QVector<RunRow> m_last;
};

}  // namespace flotilla::ui
