// One training run on this machine: a flotilla-worker child process and the metrics it writes.
//
// Decision: the app learns about the run only from <runDir>/metrics.jsonl, tailed by byte offset
// every 100 ms, never from the worker's pipes. The worker's stdout and stderr go to
// <runDir>/worker.log, stdin is /dev/null and the worker starts in its own session (setsid), so
// nothing ties its life to the app: no SIGPIPE on a closed pipe, no Ctrl+C from the app's
// terminal. That is what makes "leave it running" honest: detach() gives up supervision (the
// QProcess handle is deliberately leaked, since destroying it would kill the worker) and the run
// folder keeps growing after the app exits; a later start can re-attach by tailing the same file.
// While the app supervises, QProcess supplies the real exit code and crash status.
#pragma once

#include <QDateTime>
#include <QElapsedTimer>
#include <QJsonObject>
#include <QObject>
#include <QProcess>
#include <QString>
#include <QStringList>
#include <QVector>

#include "ui/plot/seriesstore.h"
#include "ui/runs/metricstail.h"
#include "ui/runs/runhandle.h"

class QTimer;

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
  ~LocalRun() override;  // kills a worker that is still supervised

  // Starts `workerPath arguments...` in runDir. False (state Failed, errorText() set) when the
  // process cannot be started. Every started run ends with exactly one finished(); one that
  // could not start reports exit code -1 there.
  bool start(const QString& workerPath, const QStringList& arguments);
  // `flotilla-worker demo --out-dir runDir [--steps N]` (steps <= 0: the demo's own length).
  static QStringList demoArguments(const QString& runDir, int steps);
  // `flotilla-worker launch --nproc-per-node ranks --master-port 0 -- train --config configPath`,
  // one rank too: every run gets the launcher's GPU pinning (FLOTILLA_CUDA_DEVICE, refused before
  // it starts when GPUs are missing), stall detection and root-cause report, and signal forwarding
  // (SIGTERM, SIGINT, SIGUSR1); kill() ends its ranks with it. A free rendezvous port per run.
  static QStringList trainArguments(const QString& configPath, int ranks);

  // Re-attaches to a worker left running by an earlier session (`pid`, not our child): tails
  // the metrics file from its start and watches the pid; the run ends when the process is gone,
  // with the state its summary record gives (Failed when there is none). False when pid is dead.
  bool attach(qint64 pid);
  bool isAttached() const { return m_attached; }
  // Shows a run that is not running (an earlier session's): reads its metrics file in bounded
  // chunks on the poll timer and stays in `state` (Completed, Stopped or Failed).
  void review(State state);
  // <runDir>/worker.pid: "PID STARTTIME" (the start time from /proc/PID/stat, so a recycled pid
  // is never mistaken for the worker). Written when the worker starts.
  QString pidFilePath() const;
  // The pid recorded in runDir's worker.pid when that process is still alive (and not a
  // zombie) with the recorded start time; 0 otherwise.
  static qint64 liveWorkerPid(const QString& runDir);

  // The run's id in the store (0: not stored).
  qint64 storeId() const { return m_storeId; }
  void setStoreId(qint64 id) { m_storeId = id; }
  bool stopRequested() const { return m_stopRequested; }

  void stop() override;    // graceful: SIGTERM
  void checkpointNow() override;  // SIGUSR1: a checkpoint at the next step boundary; the run goes on
  void kill() override;    // SIGKILL
  void detach();  // stop supervising and tailing; the worker keeps running

  State state() const override { return m_state; }
  QString stateText() const override;  // "running", "stopped (exit 10: preempted)", "failed: exit 4 (data error)"
  QString errorText() const { return m_error; }
  QString name() const override { return m_name; }
  QString runDir() const { return m_runDir; }
  QString metricsPath() const override;
  qint64 deliveredBytes() const override { return m_tail.offset(); }
  QString workerLogPath() const;
  QString commandLine() const { return m_commandLine; }
  qint64 pid() const { return m_pid; }
  int exitCode() const { return m_exitCode; }
  QProcess::ExitStatus exitStatus() const { return m_exitStatus; }

  QDateTime startedAt() const { return m_startedAt; }
  qint64 elapsedMs() const override;
  qint64 plannedSteps() const override { return m_plannedSteps; }  // 0 until run_start says
  qint64 lastStep() const override { return m_lastStep; }
  double lastLoss() const override { return m_lastLoss; }
  double lastValLoss() const override { return m_lastValLoss; }  // NaN before the first eval
  double tokensPerSec() const override { return m_tokensPerSec; }
  double mfu() const override { return m_mfu; }
  QString lastCheckpoint() const { return m_lastCheckpoint; }
  QJsonObject summary() const { return m_summary; }  // the summary record, empty before it

  const SeriesStore& series() const override { return m_series; }
  const QVector<LogLine>& log() const override { return m_log; }
  const MetricsTail& tail() const { return m_tail; }

 signals:
  // recordReceived, logAppended, stateChanged and changed: see RunHandle.
  void stepReceived(qint64 step, double loss, double lr, double tokensPerSec, double mfu);
  void evalReceived(qint64 step, double valLoss);
  void checkpointReceived(qint64 step, const QString& dir);
  void eventReceived(const QString& level, const QString& message);
  void finished(int exitCode, QProcess::ExitStatus exitStatus, const QString& summary);

 private:
  void pollMetrics();
  void handle(const QJsonObject& record);
  void onFinished(int exitCode, QProcess::ExitStatus status);
  void checkAttached();
  void signalWorker(int signal);
  void writePidFile();
  void onError(QProcess::ProcessError error);
  void setState(State state);
  void appendLog(const QString& level, const QString& text);
  QString summaryText() const;
  QString workerLogTail(int maxLines) const;

  QString m_name;
  QString m_runDir;
  QString m_commandLine;
  QProcess* m_process = nullptr;
  QTimer* m_poll = nullptr;
  MetricsTail m_tail;
  SeriesStore m_series;
  QVector<LogLine> m_log;

  State m_state = State::NotStarted;
  QString m_error;
  qint64 m_pid = 0;
  int m_exitCode = -1;
  QProcess::ExitStatus m_exitStatus = QProcess::NormalExit;
  bool m_killRequested = false;
  bool m_stopRequested = false;
  bool m_attached = false;
  qint64 m_storeId = 0;

  QDateTime m_startedAt;
  QElapsedTimer m_clock;
  qint64 m_endMs = -1;
  qint64 m_plannedSteps = 0;
  qint64 m_lastStep = 0;
  double m_lastLoss;
  double m_lastValLoss;
  double m_tokensPerSec = 0;
  double m_mfu = 0;
  QString m_lastCheckpoint;
  QJsonObject m_summary;
};

}  // namespace flotilla::ui
