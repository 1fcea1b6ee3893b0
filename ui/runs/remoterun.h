// One run on SSH nodes or on a Slurm cluster, as the app drives it: started (or re-attached) and
// watched on a worker thread by the same code as `flotilla run --nodes` (runs/node_run.h) or
// `flotilla run --cluster` (runs/slurm_run.h), every stored metrics record posted to the UI thread
// so the Live page follows it like a LocalRun. A Slurm run's state text carries the job's queue
// state in words ("job 12 pending: waiting for free nodes") until its steps arrive.
//
// Decision: libssh and the store writes never run on the UI thread; the thread appends each
// committed record to the run's in-memory feed (runs/record_feed.h) before posting it, so the Live
// page's late-follow replay gets exactly the records already delivered. Destroying a RemoteRun
// leaves the run going on the nodes and 'running' in the store (like an app exit): the watcher
// only gives up watching, and a later reattach() continues from the committed offset.
// Automatic recovery after a preemption (runs::supervise_node_run) is the user's launch choice; it is
// recorded with the run as an event of kind "recovery-policy" (fields {"auto", "spares", "max",
// "after"}) so a watcher that re-attaches after an app restart follows the same choice.
// An encrypted key file's passphrase is asked on the UI thread (passphraseprompt.h) while the
// worker thread waits; the wait gives up when the run is being left, so destroying a RemoteRun
// whose thread waits for an answer never deadlocks.
#pragma once

#include <QDateTime>
#include <QStringList>
#include <QVector>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/config/run_config.h"
#include "runs/node_run.h"
#include "ui/runs/clusterlaunch.h"
#include "ui/runs/passphraseprompt.h"
#include "ui/runs/runhandle.h"

class QThread;

namespace flotilla::ui {

// The launch choice about preemptions (the wizard's "Recover automatically" and "Spare nodes").
struct RecoveryChoice {
  bool enabled = false;
  QStringList spares;              // stored node names, in order of preference
  int maxRecoveries = 3;           // preemptions recovered at most
  double settleSeconds = 20;       // wait after a preemption before asking which nodes remain
  bool mirrorCheckpoints = false;  // copy each checkpoint to this machine (a lost master is survivable)
};

// The event kind that records a run's RecoveryChoice, and reading it back ("" fields: off).
inline constexpr const char* kRecoveryPolicyEvent = runs::kRecoveryPolicyEvent;
QString recoveryPolicyJson(const RecoveryChoice& choice);
RecoveryChoice recoveryChoiceFromJson(const QString& fieldsJson);

class RemoteRun : public RunHandle {
  Q_OBJECT

 public:
  // `databasePath`: the workspace's run store (its known_hosts is the workspace's own);
  // `mirrorDir`: a local folder for this run's mirrored checkpoints (--mirror-checkpoints).
  RemoteRun(const QString& name, const QString& databasePath, const QString& mirrorDir,
            QObject* parent = nullptr);
  ~RemoteRun() override;  // leaves the run running on the nodes (see above); joins the thread

  // How an encrypted key's passphrase is asked (default: askPassphraseDialog; empty: never, the
  // key is then skipped). Set before start() or reattach().
  void setPassphrasePrompt(PassphrasePrompt prompt) { m_prompt = std::move(prompt); }

  // Creates the store row, deploys and starts `config` on `nodes` (stored node names, the master
  // first), records `recovery` with it, then watches it, recovering from preemptions as `recovery`
  // allows. `workerPath`: the local flotilla-worker to deploy.
  void start(const RunConfig& config, const QStringList& nodes, const QString& workerPath,
             const RecoveryChoice& recovery = {});
  // Submits `config` to stored Slurm cluster `launch.cluster` (the store row, deploy, batch script
  // and sbatch on its thread, as `flotilla run --cluster` does them), then watches the job until it
  // leaves the queue. `workerPath`: the local flotilla-worker to deploy to the shared file system.
  void startOnCluster(const RunConfig& config, const ClusterLaunch& launch, const QString& workerPath);
  // Resumes stored Slurm run `storeId`, ended stopped or failed: its batch script is submitted
  // again (runs::resubmit_slurm_run, as `flotilla runs resume` does), the stored history is
  // replayed and the new job is watched until it leaves the queue. A refusal (the run has not
  // ended, its old job is still queued, the worker is gone) ends this RemoteRun failed with it;
  // the stored run is then untouched.
  void resumeOnCluster(qint64 storeId);
  // The local flotilla-worker a re-attached run deploys on a replacement node (set before reattach()).
  void setWorkerPath(const QString& path) { m_workerPath = path; }
  // Re-attaches to stored run `storeId` (run_dir "<node>:<dir>", status running) and watches it,
  // recovering as its stored "recovery-policy" says (less the recoveries already done); a Slurm
  // run (queued, running or requeued) is watched from its committed offset until its job ends.
  void reattach(qint64 storeId);

  // The app's start: one re-attached RemoteRun (parented to `parent`, mirrored under
  // <mirrorRoot>/<run name>) per stored run that is 'running' on SSH nodes (run_dir "<node>:/...")
  // and per Slurm run whose job has not ended (queued, running or preempted: requeued).
  // `workerPath`: the local flotilla-worker for replacement nodes (empty: a recovery that needs
  // one gives up with the reason).
  static QVector<RemoteRun*> reattachRunning(const QString& databasePath, const QString& mirrorRoot,
                                             QObject* parent,
                                             const PassphrasePrompt& prompt = askPassphraseDialog,
                                             const QString& workerPath = QString());
  // One re-attached RemoteRun for stored run `storeId` when it is running on SSH nodes or is a
  // Slurm run that has not ended, else nullptr with *error saying why (not on nodes, not running,
  // not in the store).
  static RemoteRun* reattachOne(const QString& databasePath, const QString& mirrorRoot, qint64 storeId,
                                QObject* parent, const PassphrasePrompt& prompt, const QString& workerPath,
                                QString* error = nullptr);
  // Whether a stored run_dir names a directory on an SSH node ("<node>:/...").
  static bool isNodeRunDir(const QString& runDir);
  // How the app connects to `node` of the workspace at `databasePath`: the workspace's known_hosts,
  // the app's timeouts and keepalive, `ask` for an encrypted key's passphrase (empty: skipped).
  static remote::SessionOptions sessionOptions(const std::string& databasePath, const db::SshNode& node,
                                               remote::PassphraseFn ask);

  qint64 storeId() const override { return m_storeId; }
  QString errorText() const { return m_error; }
  int exitCode() const { return m_exitCode; }
  QStringList nodes() const { return m_nodes; }
  // The Slurm cluster and job of a run on a cluster ("" for runs on SSH nodes; the job once submitted).
  QString cluster() const { return m_cluster; }
  QString jobId() const { return m_jobId; }
  RecoveryChoice recovery() const { return m_recovery; }
  // The newest note of the watcher (a lost connection, a recovery), shown with the state while
  // running; cleared when steps arrive again.
  QString note() const { return m_note; }
  bool isFinished() const;  // the watching thread has returned

  QString name() const override { return m_name; }
  State state() const override { return m_state; }
  QString stateText() const override;
  void stop() override;           // every node: TERM (checkpoint, exit 10), KILL after the grace
  void checkpointNow() override;  // SIGUSR1 to the master's launch, from the run's thread
  void kill() override;           // the same as stop(): the nodes' wrappers kill after the grace
  // A Slurm job checkpoints on its schedule and before its time limit, not on request.
  bool canCheckpoint() const override { return m_cluster.isEmpty(); }
  QString checkpointUnsupportedReason() const override;

  qint64 elapsedMs() const override;
  qint64 plannedSteps() const override { return m_plannedSteps; }
  qint64 lastStep() const override { return m_lastStep; }
  double lastLoss() const override { return m_lastLoss; }
  double lastValLoss() const override { return m_lastValLoss; }
  double tokensPerSec() const override { return m_tokensPerSec; }
  double mfu() const override { return m_mfu; }
  const SeriesStore& series() const override { return m_series; }
  const QVector<LogLine>& log() const override { return m_log; }
  std::shared_ptr<const runs::RecordFeed> feed() const override { return m_feed; }
  qint64 deliveredRecords() const override { return m_delivered; }

 signals:
  void storeIdKnown(qint64 storeId);
  void finished(int exitCode);

 private:
  void launch(std::function<void()> body);
  // Thread side: connects `names` (throws with the refusal on a host key problem).
  std::vector<runs::Node> connectOnThread(db::Database& db, const std::vector<std::string>& names);
  // Thread side: mirrors and posts history (bytes [0, upTo) of rank 0's metrics), then watches
  // (runs::supervise_node_run with `recovery`).
  void watchOnThread(std::vector<runs::Node>& nodes, const runs::Watch& w, uint64_t historyUpTo,
                     const runs::Recovery& recovery);
  // Thread side: the core's Recovery for `choice` (spares read from the store; `skip`: names
  // never used as spares, the run's nodes).
  runs::Recovery recoveryOnThread(db::Database& db, const RecoveryChoice& choice,
                                  const std::vector<std::string>& skip);
  remote::SessionOptions sessionOptionsFor(const db::SshNode& node);
  // Thread side: the run's nodes as the store has them now (after a recovery), posted.
  void postNodes(int64_t runId);
  // Thread side: asks the UI thread for a key's passphrase and waits (nullopt: no answer).
  std::optional<std::string> askPassphrase(const std::string& node, const std::string& keyPath);
  // Thread side: the hooks every watcher of this run gets (notes, budget, records, stop, leave).
  runs::WatchHooks watchHooks(int64_t runId);
  // Thread side: appends committed records to the feed and posts their delivery.
  void emitRecords(const std::vector<MetricsRecord>& records);
  // Thread side: shows (does not store again) bytes [0, upTo) of the run's metrics file.
  void replayHistory(remote::Session& session, const std::string& rid, uint64_t upTo);
  // Thread side: posts the end of the watch (`code` from the watcher; kLeft: left running). A Slurm
  // run still queued, running or requeued in the store (its login node lost) reads as left.
  void postEnded(int code, int64_t runId, bool slurm = false);
  // Thread side: connects the cluster's login node (a host key problem: the refusal with the fix).
  std::unique_ptr<remote::Session> connectLogin(const db::SlurmCluster& cluster);
  // Thread side: watches a Slurm run until its job leaves the queue (history replayed up to `historyUpTo`).
  void watchSlurmOnThread(remote::Session& login, const runs::SlurmWatch& w, uint64_t historyUpTo);
  // Thread side: re-attaches Slurm run `run` at its committed offset and watches it.
  void reattachSlurm(const db::Run& run);
  // A submission or resubmission that threw: "left" when its job exists (`submitted`), else failed.
  void postSubmitEnded(bool submitted, const std::string& error, const std::string& job);
  void postLog(const QString& level, const std::string& text);
  void failOnThread(int64_t runId, const std::string& what);
  void deliver(qint64 upTo);
  void handle(const flotilla::MetricsRecord& record);
  void appendLog(const QString& level, const QString& text);
  void setState(State state);
  void onEnded(int exitCode, const QString& status, const QString& error);

  QString m_name, m_databasePath, m_mirrorDir, m_error, m_workerPath, m_note;
  QString m_cluster, m_jobId;  // a Slurm run's cluster and job
  QStringList m_nodes;
  RecoveryChoice m_recovery;
  QThread* m_thread = nullptr;
  PassphrasePrompt m_prompt = askPassphraseDialog;
  std::atomic<bool> m_stopFlag{false};
  std::atomic<bool> m_checkpointFlag{false};
  std::atomic<bool> m_leave{false};
  State m_state = State::NotStarted;
  qint64 m_storeId = 0;
  int m_exitCode = -1;
  qint64 m_delivered = 0;
  std::shared_ptr<runs::RecordFeed> m_feed = std::make_shared<runs::RecordFeed>();
  SeriesStore m_series;
  QVector<LogLine> m_log;
  QDateTime m_startedAt, m_endedAt;
  qint64 m_plannedSteps = 0;
  qint64 m_lastStep = 0;
  double m_lastLoss;
  double m_lastValLoss;
  double m_tokensPerSec = 0;
  double m_mfu = 0;
};

}  // namespace flotilla::ui
