// One run as the app shows it, wherever it executes (this machine, SSH nodes, a Slurm cluster): a
// Qt view of the runs service's lifecycle (runs/service.h). The service starts, attaches, resumes or
// forks the run and watches it with its one watch loop, which stores the metrics by committed byte
// offset, guards the budget, recovers after a preemption where the place can, and records the end
// through runs/run_status.h, exactly as `flotilla run` and `flotilla runs ...` do.
//
// Decision: the app never asks what kind of run it holds. Opening the run (which may connect over
// SSH, deploy and submit) and watching it happen on a thread of the run's own; everything learnt
// comes back to the UI thread as queued calls: the run's records, the service's notes (the log),
// and the end. The records are the store's (runs/store_feed.h), the same for every run: each time
// the watcher commits a chunk the run's thread reads what the store now holds past its cursors,
// from the run's first step (an attached or resumed run's history included), and appends it to
// the run's in-memory feed (runs/record_feed.h) before telling the page, so a late Live page
// replays exactly what was delivered. A run nobody here watches (started by `flotilla run`, by
// another window, stored before the app started) is followed the same way: its thread reads the
// store every kFollowMs while the run's row says it runs, and its state is the row's. Only a run
// with no store (a test's LocalRuns without one) shows the watcher's records as they come. Where the run is,
// whether it can checkpoint now and why not are the service's answers, shown as they are. Buttons become
// requests the watcher polls: stop (a checkpoint, then exit), checkpoint now, kill. detach() only stops
// watching: the run goes on where it is and a later attach continues from the committed offset (see
// ~ServiceRun too). An encrypted key's passphrase is asked on the UI thread (passphraseprompt.h) while the
// run's thread waits; the wait gives up when the run is being left, so leaving never deadlocks.
#pragma once

#include <QDateTime>
#include <QElapsedTimer>
#include <QProcess>
#include <QString>
#include <QStringList>
#include <QVector>

#include <atomic>
#include <functional>
#include <memory>
#include <optional>

#include "db/run_store.h"
#include "engine/train/metrics_reader.h"
#include "runs/record_feed.h"
#include "runs/run_speed.h"
#include "runs/sample_text.h"
#include "runs/service.h"
#include "ui/plot/seriesstore.h"
#include "ui/runs/passphraseprompt.h"
#include "ui/runs/runhandle.h"

class QThread;

namespace flotilla::ui {

// Names of the series a run fills (the protocol's field names): x is the step.
inline constexpr char kSeriesLoss[] = "loss";
inline constexpr char kSeriesValLoss[] = "val_loss";
inline constexpr char kSeriesLr[] = "lr";
inline constexpr char kSeriesTokensPerSec[] = "tokens_per_s";
inline constexpr char kSeriesMfu[] = "mfu";

// The launch choice about preemptions (the wizard's "Recover automatically" and "Spare nodes"); the
// runs service records it with the run, so a watcher that re-attaches follows it too.
struct RecoveryChoice {
  bool enabled = false;
  QStringList spares;              // stored node names, in order of preference
  int maxRecoveries = 3;           // preemptions recovered at most
  double settleSeconds = 20;       // wait after a preemption before asking which nodes remain
  bool mirrorCheckpoints = false;  // copy each checkpoint to this machine (a lost master is survivable)
};
runs::RecoveryChoice toRunsRecovery(const RecoveryChoice& choice);
RecoveryChoice fromRunsRecovery(const runs::RecoveryChoice& choice);
// The event kind the runs layer records a run's RecoveryChoice with, and that record's fields
// ({"auto", "spares", "max", "after"}) written and read back ("" fields: off).
extern const char* const kRecoveryPolicyEvent;
QString recoveryPolicyJson(const RecoveryChoice& choice);
RecoveryChoice recoveryChoiceFromJson(const QString& fieldsJson);

class ServiceRun : public RunHandle {
  Q_OBJECT

 public:
  // Opens the run through the service (start, attach, resume or fork); `progress` carries the
  // service's notes while it connects, deploys or submits. Throws with the refusal in words.
  using Open =
      std::function<std::unique_ptr<runs::ActiveRun>(runs::RunService& service, const runs::Note& progress)>;

  // `options`: the app's service options (its store, its worker, "flotilla app"); the passphrase
  // callback is this run's own (see above).
  ServiceRun(const QString& name, const runs::ServiceOptions& options, QObject* parent = nullptr);
  // Joins the thread. A run still watched here whose worker is a process on this machine is killed
  // (as LocalRun was); any other is left going where it is (as RemoteRun was): detach() first to
  // leave a local worker running.
  ~ServiceRun() override;

  // How an encrypted key's passphrase is asked (default: askPassphraseDialog; empty: never, the
  // key is then skipped). Set before open().
  void setPassphrasePrompt(PassphrasePrompt prompt) { m_prompt = std::move(prompt); }

  // Opens the run and watches it to its end. With `onThisThread` the opening happens here (a start
  // on this machine: its row, folder and worker exist when this returns; a refusal ends the run
  // failed at once), else on the run's thread (nothing here waits on the network). `what`: the
  // first log line. `showStored`: the records the store has of the run are shown first (an attach).
  // Every opened run ends with exactly one finished().
  void open(Open how, const QString& what, bool onThisThread, bool showStored = false);
  // How often a followed run's thread reads the store while the run's row says it runs.
  static constexpr int kFollowMs = 500;
  // Shows a stored run that is not watched here from the store's rows (never a worker's file),
  // following them as they grow while the row says the run goes on (`state` Running), then in the
  // state the row gives when it ends (ServiceRun::stateOf).
  void review(State state, const QString& databasePath);
  // The state a stored status is shown in (Running while it runs or waits in a queue).
  static State stateOf(flotilla::db::RunStatus status);
  // Shown from the store and followed there, not watched by this window (review()).
  bool isFollowed() const { return m_followed; }
  // A followed run: the store has answered once (its records so far are delivered).
  bool storeRead() const { return m_storeRead; }
  // Stops watching; the run goes on where it is (its status stays running in the store).
  void detach();

  // Opened by attaching to a run found going (re-attached at start, or opened from the Runs table).
  bool isAttached() const { return m_showStored; }
  // The pid in runDir's worker.pid when that process is alive with the recorded start time, else 0.
  static qint64 liveWorkerPid(const QString& runDir);

  // The run's id in the store (0: not stored, or not known yet).
  qint64 storeId() const override { return m_storeId; }
  void setStoreId(qint64 id) { m_storeId = id; }
  // What the store has of the run: its start and end times (elapsed is the store's) and, for an
  // ended run, its status and note.
  void setStored(const flotilla::db::Run& run);

  QString name() const override { return m_name; }
  State state() const override { return m_state; }
  // "running on nodes a, b", "running on slurm cluster flo, job 12 · <the watcher's note>",
  // "stopping…", then the runs layer's words for the stored end ("stopped (on request)",
  // "failed (exit 4: data error: ...)"), as the Runs page and the CLI show it.
  QString stateText() const override;
  QString failureReason() const override;
  QString errorText() const { return m_error; }
  bool stopRequested() const { return m_stopRequested; }
  // Stop was asked for (any thread may read it: a start that fetches a model on nodes polls it).
  bool stopFlagged() const { return m_stopFlag.load(); }

  // A run watched here: requests its watcher polls. A run shown but watched elsewhere (`flotilla
  // run` in a terminal) or by nobody: asked through the service (request_end, request_checkpoint)
  // when its abilities allow (a live worker on this machine, pid and start time checked).
  void stop() override;           // a checkpoint at the next step, then the run exits
  void checkpointNow() override;  // a checkpoint at the next step; the run goes on
  void kill() override;           // at once (where the place can; else as stop())
  bool canStop() const override;
  bool canKill() const override;
  bool canCheckpoint() const override;
  QString checkpointUnsupportedReason() const override;
  // Whether this object watches the run (opened: started, attached, resumed, forked), not only shows it.
  bool isWatched() const { return m_watched; }

  // Where the run is, in the service's words ("this machine", "nodes a, b", "slurm cluster flo,
  // job 12"), and its folder as a user finds it ("/home/u/runs/x", "a:~/.flotilla/runs/x-3").
  QString whereText() const { return m_where; }
  QString placeText() const override { return m_folderHere ? QString() : m_where; }
  QString runDir() const { return m_runDir; }
  // <runDir>/metrics.jsonl and worker.log (meaningful when the folder is on this machine).
  QString metricsPath() const;
  QString workerLogPath() const;
  // The local worker's command line and pid ("" and 0 when the run is elsewhere).
  QString commandLine() const { return m_commandLine; }
  qint64 pid() const { return m_pid; }
  // The place's job id ("" when the place has no queue) and the run's hosts (its nodes after any
  // recovery, the cluster's name), from the service.
  QString jobId() const { return m_jobId; }
  QStringList nodes() const { return m_nodes; }
  QString cluster() const { return m_cluster; }
  // The choice about preemptions the run follows (what it was started or re-attached with).
  RecoveryChoice recovery() const { return m_recovery; }
  void setRecovery(const RecoveryChoice& choice) { m_recovery = choice; }
  // Where the run was asked to go (shown until the service says where it is).
  void setPlacement(const runs::Placement& where);
  // The newest note of the watcher (a lost connection, a recovery), shown with the state while
  // running; cleared when steps arrive again.
  QString note() const { return m_note; }
  bool isFinished() const;  // the watching thread has returned

  int exitCode() const { return m_exitCode; }
  QProcess::ExitStatus exitStatus() const { return m_exitStatus; }
  QString endNote() const { return m_endNote; }
  flotilla::db::RunStatus endStatus() const { return m_endStatus; }

  QDateTime startedAt() const { return m_startedAt; }
  qint64 elapsedMs() const override;
  qint64 plannedSteps() const override { return m_plannedSteps; }
  qint64 lastStep() const override { return m_lastStep; }
  double lastLoss() const override { return m_lastLoss; }
  double lastValLoss() const override { return m_lastValLoss; }
  double tokensPerSec() const override { return m_tokensPerSec; }
  double mfu() const override { return m_mfu; }
  double runTokensPerSec() const override { return runSpeed().tokens_per_s; }
  double runMfu() const override { return runSpeed().mfu; }
  runs::RunSpeed runSpeed() const;
  QString lastCheckpoint() const { return m_lastCheckpoint; }
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
  void storeIdKnown(qint64 storeId);
  // `summary`: the worker's summary in words ("" when the run is elsewhere or wrote none).
  void finished(int exitCode, QProcess::ExitStatus exitStatus, const QString& summary);

 private:
  struct Opened;  // what the UI thread learns once the service opened the run
  // Thread side: opens (unless `active`), then watches and posts the end.
  void run(Open how, std::shared_ptr<runs::ActiveRun> active);
  Opened describe(runs::ActiveRun& active) const;
  void onOpened(const Opened& o);
  void watchHooks(runs::WatchHooks& hooks, qint64 storedId);
  // Thread side: reads what the store has of run `id` past the feed's cursors and delivers it (a
  // followed run's row too); returns whether the row says the run ended.
  bool pullStore(qint64 id);
  void onStoredRow(const flotilla::db::Run& run, bool ended);  // a followed run's row, on the UI thread
  std::optional<std::string> askPassphrase(const std::string& node, const std::string& keyPath);
  void postLog(const QString& level, const std::string& text);
  void emitRecords(const std::vector<MetricsRecord>& records);
  void deliver(qint64 upTo);
  void handle(const flotilla::MetricsRecord& record);
  void onEnded(const runs::WatchResult& result, const QString& error);
  void fail(const QString& why);
  void logRecovery();  // the choice about preemptions, once
  void setState(State state);
  void appendLog(const QString& level, const QString& text);
  QString summaryText() const;
  QString workerLogTail(int maxLines) const;

  QString m_name;
  runs::ServiceOptions m_options;
  PassphrasePrompt m_prompt = askPassphraseDialog;
  QThread* m_thread = nullptr;
  std::shared_ptr<runs::RecordFeed> m_feed = std::make_shared<runs::RecordFeed>();
  struct StoreFollow;                     // the store reader of the run's thread (pullStore)
  std::unique_ptr<StoreFollow> m_follow;  // touched only on the run's thread
  std::atomic<bool> m_stopFlag{false}, m_checkpointFlag{false}, m_killFlag{false}, m_leave{false};
  SeriesStore m_series;
  QVector<LogLine> m_log;
  qint64 m_delivered = 0;

  State m_state = State::NotStarted;
  QString m_error, m_endNote, m_note, m_checkpointRefusal;
  flotilla::db::RunStatus m_endStatus = flotilla::db::RunStatus::kRunning;
  QString m_where, m_runDir, m_commandLine, m_jobId, m_cluster;
  QStringList m_nodes;
  RecoveryChoice m_recovery;
  qint64 m_pid = 0;
  int m_exitCode = -1;
  QProcess::ExitStatus m_exitStatus = QProcess::NormalExit;
  bool m_killRequested = false;
  bool m_showStored = false;
  bool m_watched = false;  // open() was called: requests go to this object's watcher
  // The service's answers for a run watched elsewhere (read from the store when asked).
  runs::Abilities unwatchedAbilities() const;
  void askUnwatched(const QString& what);  // "stop", "kill" or "checkpoint"
  bool m_followed = false;
  bool m_storeRead = false;
  bool m_recoveryLogged = false;
  bool m_folderHere = true;  // the run's folder is on this machine
  bool m_stopRequested = false;
  qint64 m_storeId = 0;

  QDateTime m_startedAt;
  QElapsedTimer m_clock;
  double m_storedStart = 0, m_storedEnd = 0;  // Unix seconds from the store (0: not known)
  // The store's running time when it was last read (m_storedRunningAt, Unix s; 0: never read), and
  // whether the run still accrued then.
  double m_storedRunningS = 0, m_storedRunningAt = 0;
  bool m_storedRunningOpen = false;
  QString m_lastError;  // the last error event's message
  runs::SpeedMean m_speed;
  QVector<TextSample> m_samples;
  std::unique_ptr<runs::SampleDecoder> m_decoder;
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
