// Local run supervision and metrics ingestion (see localrun.h).
#include "ui/runs/localrun.h"

#include <csignal>

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonArray>
#include <QLocale>
#include <QTimer>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/core/error.h"

namespace flotilla::ui {
namespace {

constexpr int kPollMs = 100;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

QString exitName(int code) {
  return QString::fromUtf8(flotilla::exit_code_name(static_cast<flotilla::ExitCode>(code)));
}

QString quoted(const QString& arg) {
  if (!arg.isEmpty() && !arg.contains(QLatin1Char(' ')) && !arg.contains(QLatin1Char('\''))) return arg;
  QString escaped = arg;
  escaped.replace(QLatin1Char('\''), QStringLiteral("'\\''"));
  return QLatin1Char('\'') + escaped + QLatin1Char('\'');
}

// The fields of /proc/PID/stat from field 3 (state) on; empty when the process is gone.
QList<QByteArray> procStat(qint64 pid) {
  QFile stat(QStringLiteral("/proc/%1/stat").arg(pid));
  if (!stat.open(QIODevice::ReadOnly)) return {};
  const QByteArray text = stat.readAll();
  const qsizetype close = text.lastIndexOf(')');  // the name may hold spaces and parentheses
  if (close < 0) return {};
  return text.mid(close + 2).split(' ');
}

// The processes whose parent is `pid`: the ranks of a `launch` supervisor.
QList<qint64> childPids(qint64 pid) {
  QList<qint64> out;
  if (pid <= 0) return out;
  const QByteArray parent = QByteArray::number(pid);
  for (const QString& entry : QDir(QStringLiteral("/proc")).entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
    bool numeric = false;
    const qint64 child = entry.toLongLong(&numeric);
    if (!numeric) continue;
    const QList<QByteArray> fields = procStat(child);
    if (fields.size() > 1 && fields[1] == parent) out << child;
  }
  return out;
}

// SIGKILL to the process groups led by `leaders` (a rank's group holds whatever it started).
void killGroups(const QList<qint64>& leaders) {
  for (qint64 leader : leaders) ::kill(-static_cast<pid_t>(leader), SIGKILL);
}

}  // namespace

LocalRun::LocalRun(const QString& name, const QString& runDir, QObject* parent)
    : RunHandle(parent),
      m_name(name),
      m_runDir(runDir),
      m_tail(QDir(runDir).filePath(QStringLiteral("metrics.jsonl"))),
      m_lastLoss(kNaN),
      m_lastValLoss(kNaN) {}

LocalRun::~LocalRun() {
  if (m_process && m_process->state() != QProcess::NotRunning) {
    // Not detached and still running at teardown: end it rather than orphan it unsupervised.
    m_process->disconnect(this);
    const QList<qint64> ranks = childPids(m_process->processId());
    m_process->kill();
    killGroups(ranks);
    m_process->waitForFinished(5000);
  }
}

QString LocalRun::metricsPath() const { return m_tail.path(); }
QString LocalRun::workerLogPath() const { return QDir(m_runDir).filePath(QStringLiteral("worker.log")); }

QStringList LocalRun::demoArguments(const QString& runDir, int steps) {
  QStringList args = {QStringLiteral("demo"), QStringLiteral("--out-dir"), runDir};
  if (steps > 0) args << QStringLiteral("--steps") << QString::number(steps);
  return args;
}

QStringList LocalRun::trainArguments(const QString& configPath, int ranks) {
  // An hour for start-up and the first step (a large model on CPUs takes minutes a step); later
  // steps are held to launch's adaptive limit (at least 3x the slowest step seen).
  return {QStringLiteral("launch"), QStringLiteral("--nproc-per-node"), QString::number(std::max(1, ranks)),
          QStringLiteral("--master-port"), QStringLiteral("0"), QStringLiteral("--init-timeout"),
          QStringLiteral("3600"), QStringLiteral("--"), QStringLiteral("train"), QStringLiteral("--config"),
          configPath};
}

bool LocalRun::start(const QString& workerPath, const QStringList& arguments) {
  Q_ASSERT(m_state == State::NotStarted);
  QStringList words = {quoted(workerPath)};
  for (const QString& a : arguments) words << quoted(a);
  m_commandLine = words.join(QLatin1Char(' '));
  m_startedAt = QDateTime::currentDateTime();
  m_clock.start();

  if (!QDir().mkpath(m_runDir)) {
    m_error = tr("cannot create the run folder %1").arg(m_runDir);
    appendLog(QStringLiteral("error"), m_error);
    m_endMs = 0;
    setState(State::Failed);
    emit finished(-1, QProcess::CrashExit, m_error);
    return false;
  }
  m_process = new QProcess(this);
  m_process->setProgram(workerPath);
  m_process->setArguments(arguments);
  m_process->setWorkingDirectory(m_runDir);
  m_process->setStandardInputFile(QProcess::nullDevice());
  m_process->setStandardOutputFile(workerLogPath(), QIODevice::Append);
  m_process->setStandardErrorFile(workerLogPath(), QIODevice::Append);
  // Runs in the child between fork and exec: only async-signal-safe calls belong here.
  m_process->setChildProcessModifier([] { ::setsid(); });
  connect(m_process, &QProcess::finished, this, &LocalRun::onFinished);
  connect(m_process, &QProcess::errorOccurred, this, &LocalRun::onError);

  connect(m_process, &QProcess::started, this, [this] {
    m_pid = m_process->processId();
    writePidFile();
    appendLog(QStringLiteral("info"),
              tr("worker started (pid %1); its output goes to %2").arg(m_pid).arg(workerLogPath()));
  });

  appendLog(QStringLiteral("info"), tr("$ %1").arg(m_commandLine));
  // Asynchronous: `started` or errorOccurred(FailedToStart) arrives through the event loop.
  m_process->start();
  if (m_state == State::Failed) return false;
  setState(State::Running);
  m_poll = new QTimer(this);
  m_poll->setInterval(kPollMs);
  connect(m_poll, &QTimer::timeout, this, &LocalRun::pollMetrics);
  m_poll->start();
  return true;
}

void LocalRun::stop() {
  if (m_state != State::Running) return;
  appendLog(
      QStringLiteral("info"),
      tr("stop requested (SIGTERM): the worker saves a checkpoint at its next step boundary, then exits"));
  m_stopRequested = true;
  setState(State::Stopping);
  signalWorker(SIGTERM);
}

void LocalRun::checkpointNow() {
  if (m_state != State::Running) return;
  appendLog(QStringLiteral("info"),
            tr("checkpoint requested (SIGUSR1): the worker saves one at its next step boundary and goes on"));
  signalWorker(SIGUSR1);
}

void LocalRun::kill() {
  if (!isActive()) return;
  m_killRequested = true;
  appendLog(QStringLiteral("warning"),
            tr("kill requested (SIGKILL): progress since the last checkpoint is lost"));
  // `launch` cannot pass SIGKILL on: its ranks (each in a process group of its own) are found
  // before it dies, and ended with it.
  const QList<qint64> ranks = childPids(m_process && m_process->processId() > 0 ? m_process->processId() : m_pid);
  signalWorker(SIGKILL);
  killGroups(ranks);
}

void LocalRun::detach() {
  if (!isActive()) return;
  pollMetrics();
  m_poll->stop();
  if (m_process) {
    m_process->disconnect(this);
    // Deliberate leak: ~QProcess would kill the worker. The handle lives until the app exits.
    m_process->setParent(nullptr);
    m_process = nullptr;
  }
  appendLog(QStringLiteral("info"),
            tr("left running (pid %1): it keeps writing %2 after Flotilla closes").arg(m_pid).arg(m_runDir));
  m_endMs = m_clock.elapsed();
  setState(State::Detached);
}

void LocalRun::signalWorker(int signal) {
  const qint64 pid = m_process && m_process->processId() > 0 ? m_process->processId() : m_pid;
  if (pid > 0) ::kill(static_cast<pid_t>(pid), signal);
}

QString LocalRun::pidFilePath() const { return QDir(m_runDir).filePath(QStringLiteral("worker.pid")); }

namespace {
// Field 22 of /proc/PID/stat (start time in clock ticks since boot), and whether it is a zombie.
QByteArray procStartTime(qint64 pid, bool* zombie = nullptr) {
  const QList<QByteArray> fields = procStat(pid);  // fields from 3 (state) on
  if (fields.size() < 20) return {};
  if (zombie) *zombie = fields[0] == "Z" || fields[0] == "X";
  return fields[19];
}
}  // namespace

void LocalRun::writePidFile() {
  QFile file(pidFilePath());
  if (file.open(QIODevice::WriteOnly | QIODevice::Truncate))
    file.write(QByteArray::number(m_pid) + ' ' + procStartTime(m_pid) + '\n');
}

qint64 LocalRun::liveWorkerPid(const QString& runDir) {
  QFile file(QDir(runDir).filePath(QStringLiteral("worker.pid")));
  if (!file.open(QIODevice::ReadOnly)) return 0;
  const QList<QByteArray> words = file.readAll().trimmed().split(' ');
  const qint64 pid = words.value(0).toLongLong();
  if (pid <= 0) return 0;
  bool zombie = false;
  const QByteArray start = procStartTime(pid, &zombie);
  if (start.isEmpty() || zombie) return 0;
  if (words.size() > 1 && !words[1].isEmpty() && words[1] != start) return 0;  // a recycled pid
  return pid;
}

bool LocalRun::attach(qint64 pid) {
  Q_ASSERT(m_state == State::NotStarted);
  bool zombie = false;
  if (pid <= 0 || procStartTime(pid, &zombie).isEmpty() || zombie) return false;
  m_pid = pid;
  m_attached = true;
  m_startedAt = QDateTime::currentDateTime();
  m_clock.start();
  m_commandLine = tr("(re-attached to pid %1)").arg(pid);
  appendLog(QStringLiteral("info"),
            tr("re-attached to the worker left running (pid %1); reading %2").arg(pid).arg(metricsPath()));
  setState(State::Running);
  m_poll = new QTimer(this);
  m_poll->setInterval(kPollMs);
  connect(m_poll, &QTimer::timeout, this, [this] {
    pollMetrics();
    checkAttached();
  });
  m_poll->start();
  return true;
}

void LocalRun::review(State state) {
  Q_ASSERT(m_state == State::NotStarted);
  m_startedAt = QDateTime::currentDateTime();
  m_clock.start();
  m_endMs = 0;
  setState(state);
  m_poll = new QTimer(this);
  m_poll->setInterval(kPollMs);
  connect(m_poll, &QTimer::timeout, this, [this] {
    const qint64 before = m_tail.offset();
    pollMetrics();
    if (m_tail.offset() == before) m_poll->stop();
  });
  m_poll->start();
  pollMetrics();
}

void LocalRun::checkAttached() {
  if (!m_attached || !isActive()) return;
  bool zombie = false;
  if (!procStartTime(m_pid, &zombie).isEmpty() && !zombie) return;
  for (qint64 before = -1; before != m_tail.offset();) {
    before = m_tail.offset();
    pollMetrics();
  }
  m_poll->stop();
  m_endMs = m_clock.elapsed();
  const QString exit = m_summary.value(QLatin1String("exit")).toString();
  State next = State::Failed;
  if (exit == QLatin1String("completed")) {
    next = State::Completed;
    m_exitCode = 0;
  } else if (exit == QLatin1String("preempted") || exit == QLatin1String("stopped")) {
    next = m_killRequested ? State::Killed : State::Stopped;
    m_exitCode = static_cast<int>(flotilla::ExitCode::kPreempted);
  } else {
    next = m_killRequested ? State::Killed : State::Failed;
    m_error = tr("the worker (pid %1) ended without a summary record").arg(m_pid);
  }
  setState(next);
  appendLog(next == State::Failed ? QStringLiteral("error") : QStringLiteral("info"),
            tr("worker ended: %1").arg(stateText()));
  emit changed();
  emit finished(m_exitCode, QProcess::NormalExit, summaryText());
}

qint64 LocalRun::elapsedMs() const {
  if (!m_clock.isValid()) return 0;
  return m_endMs >= 0 ? m_endMs : m_clock.elapsed();
}

QString LocalRun::stateText() const {
  switch (m_state) {
    case State::NotStarted:
      return tr("not started");
    case State::Running:
      return tr("running");
    case State::Stopping:
      return tr("stopping…");
    case State::Completed:
      return tr("completed");
    case State::Stopped:
      return tr("stopped (exit %1: %2)").arg(m_exitCode).arg(exitName(m_exitCode));
    case State::Killed:
      return tr("killed");
    case State::Detached:
      return tr("left running");
    case State::Failed:
      if (m_exitCode < 0 && !m_error.isEmpty()) return tr("failed: %1").arg(m_error);
      if (m_exitStatus == QProcess::CrashExit) return tr("failed: the worker crashed");
      return tr("failed: exit %1 (%2)").arg(m_exitCode).arg(exitName(m_exitCode));
  }
  return {};
}

void LocalRun::pollMetrics() {
  bool any = false;
  // Bounded reads; a backlog drains over several polls instead of stalling the UI thread.
  for (const QJsonObject& record : m_tail.poll()) {
    handle(record);
    any = true;
  }
  if (any) emit changed();
}

void LocalRun::handle(const QJsonObject& r) {
  emit recordReceived(r);
  const QString type = r.value(QLatin1String("type")).toString();
  const qint64 step = r.value(QLatin1String("step")).toInteger();
  if (type == QLatin1String("step")) {
    m_lastStep = step;
    m_lastLoss = r.value(QLatin1String("loss")).toDouble(kNaN);
    m_tokensPerSec = r.value(QLatin1String("tokens_per_s")).toDouble();
    m_mfu = r.value(QLatin1String("mfu")).toDouble();
    const double lr = r.value(QLatin1String("lr")).toDouble();
    m_series.append(QLatin1String(kSeriesLoss), double(step), m_lastLoss);
    m_series.append(QLatin1String(kSeriesLr), double(step), lr);
    m_series.append(QLatin1String(kSeriesTokensPerSec), double(step), m_tokensPerSec);
    m_series.append(QLatin1String(kSeriesMfu), double(step), m_mfu);
    emit stepReceived(step, m_lastLoss, lr, m_tokensPerSec, m_mfu);
  } else if (type == QLatin1String("eval")) {
    m_lastValLoss = r.value(QLatin1String("val_loss")).toDouble(kNaN);
    m_series.append(QLatin1String(kSeriesValLoss), double(step), m_lastValLoss);
    appendLog(QStringLiteral("info"),
              tr("eval at step %1: validation loss %2").arg(step).arg(m_lastValLoss, 0, 'f', 4));
    emit evalReceived(step, m_lastValLoss);
  } else if (type == QLatin1String("checkpoint")) {
    m_lastCheckpoint = r.value(QLatin1String("dir")).toString();
    const double mb = r.value(QLatin1String("bytes")).toDouble() / (1024.0 * 1024.0);
    appendLog(QStringLiteral("info"), tr("checkpoint at step %1 (%2): %3, %4 MiB in %5 s")
                                          .arg(step)
                                          .arg(r.value(QLatin1String("reason")).toString(), m_lastCheckpoint)
                                          .arg(mb, 0, 'f', 1)
                                          .arg(r.value(QLatin1String("seconds")).toDouble(), 0, 'f', 2));
    emit checkpointReceived(step, m_lastCheckpoint);
  } else if (type == QLatin1String("event")) {
    const QString level = r.value(QLatin1String("level")).toString(QStringLiteral("info"));
    const QString message = r.value(QLatin1String("message")).toString();
    appendLog(level, message);
    emit eventReceived(level, message);
  } else if (type == QLatin1String("run_start")) {
    const QJsonObject train =
        r.value(QLatin1String("config")).toObject().value(QLatin1String("train")).toObject();
    m_plannedSteps = train.value(QLatin1String("steps")).toInteger(m_plannedSteps);
    const double params = r.value(QLatin1String("parameters")).toDouble();
    QString text = tr("run %1 started: %2M parameters, %3 steps, world size %4")
                       .arg(r.value(QLatin1String("run")).toString())
                       .arg(params / 1e6, 0, 'f', 2)
                       .arg(m_plannedSteps)
                       .arg(r.value(QLatin1String("world_size")).toInt(1));
    const QString resumed = r.value(QLatin1String("resumed_from")).toString();
    if (!resumed.isEmpty()) text += tr(", resumed from %1").arg(resumed);
    appendLog(QStringLiteral("info"), text);
  } else if (type == QLatin1String("summary")) {
    m_summary = r;
    appendLog(QStringLiteral("info"), tr("summary: %1").arg(summaryText()));
  }
  // `sample` and record types added later are ignored here (protocol: readers skip what they
  // do not know).
}

void LocalRun::onFinished(int exitCode, QProcess::ExitStatus status) {
  // Drain the file: the last records (checkpoint, summary) were written just before the exit.
  for (qint64 before = -1; before != m_tail.offset();) {
    before = m_tail.offset();
    pollMetrics();
  }
  if (m_poll) m_poll->stop();
  if (m_tail.pendingBytes() > 0)
    appendLog(QStringLiteral("warning"),
              tr("metrics.jsonl ends in a torn line of %1 bytes (the worker died mid-write)")
                  .arg(m_tail.pendingBytes()));
  m_exitCode = exitCode;
  m_exitStatus = status;
  m_endMs = m_clock.elapsed();
  State next;
  // A signal death after our own SIGKILL (or a SIGTERM the worker could not handle yet) is the
  // requested end, not a crash.
  if (status == QProcess::CrashExit && (m_killRequested || m_state == State::Stopping)) {
    next = State::Killed;
  } else if (status == QProcess::CrashExit) {
    next = State::Failed;
  } else if (exitCode == static_cast<int>(flotilla::ExitCode::kOk)) {
    next = State::Completed;
  } else if (exitCode == static_cast<int>(flotilla::ExitCode::kPreempted)) {
    next = State::Stopped;
  } else {
    next = State::Failed;
  }
  if (next == State::Failed) {
    const QString tail = workerLogTail(8);
    if (!tail.isEmpty()) appendLog(QStringLiteral("error"), tr("last lines of worker.log:\n%1").arg(tail));
  }
  setState(next);
  appendLog(next == State::Failed ? QStringLiteral("error") : QStringLiteral("info"),
            tr("worker ended: %1").arg(stateText()));
  emit changed();
  emit finished(exitCode, status, summaryText());
}

void LocalRun::onError(QProcess::ProcessError error) {
  if (error != QProcess::FailedToStart || m_state == State::Failed) return;
  m_error = tr("cannot start %1: %2").arg(m_process->program(), m_process->errorString());
  if (m_poll) m_poll->stop();
  appendLog(QStringLiteral("error"), m_error);
  m_endMs = m_clock.elapsed();
  setState(State::Failed);
  emit finished(-1, QProcess::CrashExit, m_error);
}

void LocalRun::setState(State state) {
  if (state == m_state) return;
  m_state = state;
  emit stateChanged(state);
}

void LocalRun::appendLog(const QString& level, const QString& text) {
  m_log.append({level, text});
  emit logAppended(level, text);
}

QString LocalRun::summaryText() const {
  if (m_summary.isEmpty()) return tr("no summary record (the worker did not finish its run loop)");
  const QJsonValue best = m_summary.value(QLatin1String("best_val_loss"));
  return tr("%1 steps, final loss %2, best validation loss %3, %4 s, %5 tokens/s, exit %6")
      .arg(m_summary.value(QLatin1String("steps")).toInteger())
      .arg(m_summary.value(QLatin1String("final_loss")).toDouble(), 0, 'f', 4)
      .arg(best.isDouble() ? QString::number(best.toDouble(), 'f', 4) : tr("none"))
      .arg(m_summary.value(QLatin1String("wall_s")).toDouble(), 0, 'f', 1)
      .arg(QLocale().toString(m_summary.value(QLatin1String("mean_tokens_per_s")).toDouble(), 'f', 0))
      .arg(m_summary.value(QLatin1String("exit")).toString());
}

QString LocalRun::workerLogTail(int maxLines) const {
  QFile file(workerLogPath());
  if (!file.open(QIODevice::ReadOnly)) return {};
  const qint64 window = 4096;
  if (file.size() > window) file.seek(file.size() - window);
  const QStringList lines = QString::fromUtf8(file.readAll()).split(QLatin1Char('\n'), Qt::SkipEmptyParts);
  return lines.mid(std::max<qsizetype>(0, lines.size() - maxLines)).join(QLatin1Char('\n'));
}

}  // namespace flotilla::ui
