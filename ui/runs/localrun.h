// One training run on this machine as the app shows it: a view of the runs layer's lifecycle
// (runs/local_run.h), which starts the worker, stores its metrics by byte offset, enforces the
// budget and records how the run ended, exactly as `flotilla run` does.
//
// Decision: the watcher runs on a thread of its own and everything it learns comes back to the UI
// thread as queued calls: the stored records (for the Live page, with the typed signals below),
// its notes (for the log), and the end. The worker runs in a session of its own with its output in
// <runDir>/worker.log, so nothing ties its life to the app: detach() only stops watching, and a
// later start re-attaches by worker.pid (pid and start time). Buttons become requests the watcher
// polls: stop (SIGTERM: checkpoint, exit 10), checkpoint now (SIGUSR1), kill (SIGKILL of the
// worker and its ranks).
#pragma once

#include <QDateTime>
#include <QElapsedTimer>
#include <QObject>
#include <QProcess>
#include <QString>
#include <QStringList>
#include <QVector>

#include <atomic>
#include <memory>
#include <optional>

#include "db/run_store.h"
#include "engine/train/metrics_reader.h"
#include "runs/local_run.h"
#include "runs/record_feed.h"
#include "runs/run_speed.h"
#include "runs/sample_text.h"
#include "ui/plot/seriesstore.h"
#include "ui/runs/runhandle.h"

class QThread;

namespace flotilla::db {
class Writer;
}

namespace flotilla::ui {

// Names of the series a LocalRun fills (the protocol's field names): x is the step.
inline constexpr char kSeriesLoss[] = "loss";
inline constexpr char kSeriesValLoss[] = "val_loss";
inline constexpr char kSeriesLr[] = "lr";
inline constexpr char kSeriesTokensPerSec[] = "tokens_per_s";
inline constexpr char kSeriesMfu[] = "mfu";

class LocalRun : public RunHandle {
  Q_OBJECT

 public:
  LocalRun(const QString& name, const QString& runDir, QObject* parent = nullptr);
  ~LocalRun() override;  // kills a worker that is still watched (not detached); joins the watcher

  // The run store the watcher writes to (nullptr: nothing is stored; records are still shown).
  // Set before start() or attach(), together with setStoreId().
  void setWriter(flotilla::db::Writer* writer) { m_writer = writer; }

  // Starts `workerPath arguments...` in runDir and watches it. False (state Failed, errorText()
  // set) when the process cannot be started. Every started run ends with exactly one finished();
  // one that could not start reports exit code -1 there.
  bool start(const QString& workerPath, const QStringList& arguments);
  // `flotilla-worker demo --out-dir runDir [--steps N]` (steps <= 0: the demo's own length).
  static QStringList demoArguments(const QString& runDir, int steps);
  // The training command line of runs/worker_command.h (launch with `ranks` ranks, crash restarts,
  // an hour for start-up) for `configPath`, without the worker binary.
  static QStringList trainArguments(const QString& configPath, int ranks, int maxRestarts = 2);

  // Re-attaches to a worker left running by an earlier session (`pid`, not our child): watches
  // it from the store's committed offset; the run ends with the state its summary record gives
  // (Failed when there is none). False when pid is dead.
  bool attach(qint64 pid);
  bool isAttached() const { return m_attached; }
  // Shows a stored run that is not running (an earlier session's), from the store's rows, and
  // stays in `state` (Completed, Stopped or Failed).
  void review(State state, const QString& databasePath);
  // <runDir>/worker.pid: "PID STARTTIME" (runs/process.h).
  QString pidFilePath() const;
  // The pid recorded in runDir's worker.pid when that process is still alive (and not a zombie)
  // with the recorded start time; 0 otherwise.
  static qint64 liveWorkerPid(const QString& runDir);

  // What the store has of the run: its start and end times (elapsed is the store's, so a run
  // re-attached or reopened shows the time it has really run) and, for an ended run, its status
  // and note (the runs layer's words: runs::status_text). Set after setStoreId().
  void setStored(const flotilla::db::Run& run);

  // The run's id in the store (0: not stored).
  qint64 storeId() const override { return m_storeId; }
  void setStoreId(qint64 id) { m_storeId = id; }
  bool stopRequested() const { return m_stopRequested; }

  void stop() override;           // graceful: SIGTERM
  void checkpointNow() override;  // SIGUSR1: a checkpoint at the next step boundary; the run goes on
  void kill() override;           // SIGKILL, ranks included
  void detach();                  // stop watching; the worker keeps running

  State state() const override { return m_state; }
  // "running", "stopping…", then the runs layer's words for the stored end, as the Runs page and
  // the CLI show it: "stopped (on request)", "stopped (killed on request)", "stopped (budget
  // reached: $0.0201 of $0.02)", "failed (exit 4: data error: ...)".
  QString stateText() const override;
  // Why a failed run failed, in the worker's words (its last error event, else the end's note);
  // "" unless the run failed.
  QString failureReason() const override;
  QString errorText() const { return m_error; }
  QString name() const override { return m_name; }
  QString runDir() const { return m_runDir; }
  QString metricsPath() const;
  QString workerLogPath() const;
  QString commandLine() const { return m_commandLine; }
  qint64 pid() const { return m_pid; }
  int exitCode() const { return m_exitCode; }
  QProcess::ExitStatus exitStatus() const { return m_exitStatus; }
  // The note the store keeps with the end ("budget reached: ..."), "" before the end.
  QString endNote() const { return m_endNote; }
  // The status the watcher recorded at the end (kRunning until then).
  flotilla::db::RunStatus endStatus() const { return m_endStatus; }

  QDateTime startedAt() const { return m_startedAt; }
  qint64 elapsedMs() const override;
  qint64 plannedSteps() const override { return m_plannedSteps; }  // 0 until run_start says
  qint64 lastStep() const override { return m_lastStep; }
  double lastLoss() const override { return m_lastLoss; }
  double lastValLoss() const override { return m_lastValLoss; }  // NaN before the first eval
  double tokensPerSec() const override { return m_tokensPerSec; }
  double mfu() const override { return m_mfu; }
  double runTokensPerSec() const override { return runSpeed().tokens_per_s; }
  double runMfu() const override { return runSpeed().mfu; }
  // The summary's figures when the run wrote one, else the mean of its steps so far (or, for a
  // reviewed run, of its stored steps).
  runs::RunSpeed runSpeed() const;
  QString lastCheckpoint() const { return m_lastCheckpoint; }
  // The summary record's exit ("completed", "preempted", ...), "" before it.
  QString summaryExit() const { return m_summary ? QString::fromStdString(m_summary->exit) : QString(); }
  const std::optional<flotilla::SummaryRecord>& summary() const { return m_summary; }

  const SeriesStore& series() const override { return m_series; }
  const QVector<LogLine>& log() const override { return m_log; }
  QVector<TextSample> samples() const override { return m_samples; }
  std::shared_ptr<const runs::RecordFeed> feed() const override { return m_feed; }
  qint64 deliveredRecords() const override { return m_delivered; }

 signals:
  // recordReceived, logAppended, stateChanged and changed: see RunHandle.
  void stepReceived(qint64 step, double loss, double lr, double tokensPerSec, double mfu);
  void evalReceived(qint64 step, double valLoss);
  void checkpointReceived(qint64 step, const QString& dir);
  void eventReceived(const QString& level, const QString& message);
  void finished(int exitCode, QProcess::ExitStatus exitStatus, const QString& summary);

 private:
  void watch(const runs::LocalWatch& w);
  void deliver(qint64 upTo);
  void handle(const flotilla::MetricsRecord& record);
  void onEnded(const runs::LocalOutcome& outcome);
  void fail(const QString& why);
  void setState(State state);
  void appendLog(const QString& level, const QString& text);
  QString summaryText() const;
  QString workerLogTail(int maxLines) const;

  QString m_name;
  QString m_runDir;
  QString m_commandLine;
  flotilla::db::Writer* m_writer = nullptr;
  QThread* m_thread = nullptr;
  std::shared_ptr<runs::RecordFeed> m_feed = std::make_shared<runs::RecordFeed>();
  std::atomic<bool> m_stopFlag{false}, m_checkpointFlag{false}, m_killFlag{false}, m_leave{false};
  SeriesStore m_series;
  QVector<LogLine> m_log;
  qint64 m_delivered = 0;

  State m_state = State::NotStarted;
  QString m_error, m_endNote;
  flotilla::db::RunStatus m_endStatus = flotilla::db::RunStatus::kRunning;
  qint64 m_pid = 0;
  int m_exitCode = -1;
  QProcess::ExitStatus m_exitStatus = QProcess::NormalExit;
  bool m_killRequested = false;
  bool m_stopRequested = false;
  bool m_attached = false;
  qint64 m_storeId = 0;

  QDateTime m_startedAt;
  QElapsedTimer m_clock;
  double m_storedStart = 0, m_storedEnd = 0;  // Unix seconds from the store (0: not known)
  QString m_lastError;                        // the last error event's message
  runs::SpeedMean m_speed;                    // over the steps delivered
  QVector<TextSample> m_samples;
  std::unique_ptr<runs::SampleDecoder> m_decoder;  // made at the first sample, from run.toml
  std::optional<runs::RunSpeed> m_storedSpeed;
  qint64 m_endMs = -1;
  qint64 m_plannedSteps = 0;
  qint64 m_lastStep = 0;
  double m_lastLoss;
  double m_lastValLoss;
  double m_tokensPerSec = 0;
  double m_mfu = 0;
  QString m_lastCheckpoint;
  std::optional<flotilla::SummaryRecord> m_summary;
};

}  // namespace flotilla::ui
