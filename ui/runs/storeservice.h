// The app's run store service: the db Writer (its own thread), the metrics ingestor (its own
// thread) and the snapshot poller (its own thread, its own read connection), behind one QObject
// whose signals arrive on the UI thread.
//
// Decision: the UI thread never waits on the disk for metrics. The only synchronous calls are
// createRun() and the edits behind explicit user actions (tags, notes, delete), each one small
// transaction on the writer's queue; everything per step goes through IngestThread. Results come
// back as queued signals (STYLE.md principle 7); shutdown is stop polling, drain, join.
#pragma once

#include <QObject>
#include <QString>
#include <QStringList>
#include <QThread>
#include <QVector>

#include <memory>
#include <optional>

#include "db/run_store.h"
#include "ui/runs/ingestthread.h"
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
  IngestThread& ingest() { return *m_ingest; }

  // Creates a run row (status created) on this machine's node with `devices` devices attached
  // (their cost accrues while it runs). Returns its id, or 0 with *error set.
  qint64 createRun(const flotilla::db::NewRun& run, int devices, QString* error = nullptr);
  // A fork of `parentId` (parent kind "fork") named `name` with its own config and folder.
  qint64 createFork(qint64 parentId, const QString& name, const std::string& configToml,
                    const std::string& configJson, const QString& runDir, int devices, QString* error = nullptr);
  // A free run name based on `base` (base, base-2, ...).
  QString uniqueName(const QString& base);
  // The stored run, read on the writer's connection (small, synchronous).
  std::optional<flotilla::db::Run> run(qint64 id);
  // Runs the store says are running on this machine (for re-attach at start).
  QVector<flotilla::db::Run> runningLocalRuns();
  // Asynchronous status change (skipped when the state machine refuses it).
  void setStatus(qint64 id, flotilla::db::RunStatus to, const QString& reason,
                 std::optional<int> exitCode = std::nullopt);
  void addEvent(qint64 id, const QString& level, const QString& message);

  // User edits: synchronous, false with *error when the store refused.
  bool setTags(qint64 id, const QStringList& tags, QString* error = nullptr);
  bool setNotes(qint64 id, const QString& notes, QString* error = nullptr);
  // Refuses a running run; the run folder is left on disk.
  bool deleteRun(qint64 id, QString* error = nullptr);

  // Ingest control (see IngestThread).
  void track(qint64 id, const QString& metricsPath);
  void untrack(qint64 id);
  void finish(qint64 id, const QString& metricsPath, RunEnd end);

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
  std::unique_ptr<IngestThread> m_ingest;
  QThread m_pollThread;
  StorePoller* m_poller = nullptr;
  QVector<RunRow> m_last;
};

}  // namespace flotilla::ui
