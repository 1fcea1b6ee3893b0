// A local run as the app shows it (see localrun.h): the runs layer's watcher on a thread, its
// records and notes posted to the UI thread.
#include "ui/runs/localrun.h"

#include <csignal>

#include <QCoreApplication>
#include <QDir>
#include <QFile>
#include <QLocale>
#include <QMetaObject>
#include <QThread>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "db/errors.h"
#include "db/queries.h"
#include "db/writer.h"
#include "engine/config/config_io.h"
#include "engine/core/error.h"
#include "runs/process.h"
#include "runs/run_status.h"
#include "runs/worker_command.h"
#include "ui/common/numberformat.h"

namespace flotilla::ui {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace

LocalRun::LocalRun(const QString& name, const QString& runDir, QObject* parent)
    : RunHandle(parent), m_name(name), m_runDir(runDir), m_lastLoss(kNaN), m_lastValLoss(kNaN) {}

LocalRun::~LocalRun() {
  if (m_thread) {
    // Still watched at teardown (not detached): end it rather than orphan it unwatched.
    if (!m_thread->isFinished() && !m_leave.load()) m_killFlag.store(true);
    m_thread->wait();
    delete m_thread;
  }
}

QString LocalRun::metricsPath() const {
  return QDir(m_runDir).filePath(QString::fromLatin1(runs::kMetricsFile));
}
QString LocalRun::workerLogPath() const {
  return QDir(m_runDir).filePath(QString::fromLatin1(runs::kWorkerLogFile));
}
QString LocalRun::pidFilePath() const {
  return QDir(m_runDir).filePath(QString::fromLatin1(runs::kWorkerPidFile));
}

qint64 LocalRun::liveWorkerPid(const QString& runDir) { return runs::live_worker_pid(runDir.toStdString()); }

QStringList LocalRun::demoArguments(const QString& runDir, int steps) {
  QStringList out;
  const auto argv = runs::demo_argv("", runDir.toStdString(), steps);
  for (size_t i = 1; i < argv.size(); ++i) out << QString::fromStdString(argv[i]);
  return out;
}

QStringList LocalRun::trainArguments(const QString& configPath, int ranks, int maxRestarts) {
  runs::TrainCommand c;
  c.config_path = configPath.toStdString();
  c.ranks = ranks;
  c.max_restarts = maxRestarts;
  QStringList out;
  const auto argv = runs::train_argv(c);
  for (size_t i = 1; i < argv.size(); ++i) out << QString::fromStdString(argv[i]);
  return out;
}

bool LocalRun::start(const QString& workerPath, const QStringList& arguments) {
  Q_ASSERT(m_state == State::NotStarted);
  runs::SpawnOptions spawn;
  spawn.argv.push_back(workerPath.toStdString());
  for (const QString& a : arguments) spawn.argv.push_back(a.toStdString());
  spawn.run_dir = m_runDir.toStdString();
  m_commandLine = QString::fromStdString(runs::command_line(spawn.argv));
  m_startedAt = QDateTime::currentDateTime();
  m_clock.start();
  appendLog(QStringLiteral("info"), tr("$ %1").arg(m_commandLine));
  runs::LocalWatch w;
  try {
    w = runs::start_local_run(m_storeId > 0 ? m_writer : nullptr, m_storeId, m_name.toStdString(), spawn,
                              "flotilla app", 0);
  } catch (const std::exception& e) {
    fail(QString::fromUtf8(e.what()));
    return false;
  }
  m_pid = w.pid;
  appendLog(QStringLiteral("info"),
            tr("worker started (pid %1); its output goes to %2").arg(m_pid).arg(workerLogPath()));
  setState(State::Running);
  watch(w);
  return true;
}

bool LocalRun::attach(qint64 pid) {
  Q_ASSERT(m_state == State::NotStarted);
  runs::LocalWatch w = runs::attach_local_run(m_storeId, m_name.toStdString(), m_runDir.toStdString(),
                                              "flotilla app (re-attached)", 0);
  if (pid <= 0 || !runs::process_alive(static_cast<pid_t>(pid))) return false;
  if (w.pid != pid) {  // attach to the pid asked for (a test, or worker.pid rewritten meanwhile)
    w.pid = static_cast<pid_t>(pid);
    w.start_time = runs::process_start_time(w.pid);
  }
  w.log_offset = 0;
  m_pid = pid;
  m_attached = true;
  m_startedAt = QDateTime::currentDateTime();
  m_clock.start();
  m_commandLine = tr("(re-attached to pid %1)").arg(pid);
  appendLog(QStringLiteral("info"),
            tr("re-attached to the worker left running (pid %1); reading %2").arg(pid).arg(metricsPath()));
  setState(State::Running);
  watch(w);
  return true;
}

void LocalRun::watch(const runs::LocalWatch& w) {
  m_thread = QThread::create([this, w] {
    runs::WatchHooks hooks;
    hooks.note = [this](const std::string& text) {
      QMetaObject::invokeMethod(
          this, [this, t = QString::fromStdString(text)] { appendLog(QStringLiteral("warning"), t); },
          Qt::QueuedConnection);
    };
    hooks.on_budget = [this](const db::BudgetStatus& b) {
      postBudget(b.message, b.action == db::BudgetAction::kStop);
    };
    hooks.on_committed = [this](const std::vector<MetricsRecord>& records, uint64_t) {
      m_feed->append(records);
      const qint64 upTo = static_cast<qint64>(m_feed->size());
      QMetaObject::invokeMethod(
          this, [this, upTo] { deliver(upTo); }, Qt::QueuedConnection);
    };
    hooks.stop_requested = [this] { return m_stopFlag.load(); };
    hooks.checkpoint_requested = [this] { return m_checkpointFlag.exchange(false); };
    hooks.kill_requested = [this] { return m_killFlag.load(); };
    hooks.leave_requested = [this] { return m_leave.load(); };
    runs::LocalOutcome out;
    try {
      out = runs::watch_local_run(m_storeId > 0 ? m_writer : nullptr, w, hooks);
    } catch (const std::exception& e) {
      out.exit_code = -1;
      out.end.status = db::RunStatus::kFailed;
      out.end.note = e.what();
    }
    const qint64 upTo = static_cast<qint64>(m_feed->size());
    QMetaObject::invokeMethod(
        this,
        [this, out, upTo] {
          deliver(upTo);
          onEnded(out);
        },
        Qt::QueuedConnection);
  });
  m_thread->start();
}

void LocalRun::review(State state, const QString& databasePath) {
  Q_ASSERT(m_state == State::NotStarted);
  m_startedAt = QDateTime::currentDateTime();
  m_clock.start();
  m_endMs = 0;
  setState(state);
  // What the store has of the run (never the worker's file a second time), read off the UI thread.
  const std::string path = databasePath.toStdString();
  const int64_t id = m_storeId;
  m_thread = QThread::create([this, path, id] {
    std::vector<MetricsRecord> records;
    try {
      db::OpenOptions o;
      o.create = false;
      o.quick_check = false;
      const db::Database reader(path, o);
      // The run's start on its own clock, as its run_start record said it.
      const db::Run run = db::get_run(reader, id);
      const runs::RunSpeed speed = runs::run_speed(reader, run);
      QMetaObject::invokeMethod(
          this, [this, speed] { m_storedSpeed = speed; }, Qt::QueuedConnection);
      {
        MetricsRecord start;
        start.type = MetricsRecordType::kRunStart;
        start.time = run.started_at.value_or(0);
        RunStartRecord rs;
        rs.run = run.name;
        rs.world_size = static_cast<int>(run.world_size.value_or(1));
        rs.parameters = static_cast<uint64_t>(run.parameters.value_or(0));
        for (const auto& [key, value] : db::flatten_config(run.config_json))
          if (key == "train.steps") rs.planned_steps = std::atoll(value.c_str());
        start.body = rs;
        records.push_back(std::move(start));
      }
      const std::vector<std::string> names = {"loss",     "lr",     "tokens_per_s", "mfu",
                                              "val_loss", "tokens", "step_ms"};
      for (const db::StepRow& row : db::step_rows(reader, id, names)) {
        if (!std::isnan(row.values[0])) {
          MetricsRecord r;
          r.type = MetricsRecordType::kStep;
          r.time = row.time;
          StepRecord s;
          s.step = row.step;
          s.loss = static_cast<float>(row.values[0]);
          s.lr = std::isnan(row.values[1]) ? 0 : row.values[1];
          s.tokens_per_s = std::isnan(row.values[2]) ? 0 : row.values[2];
          s.mfu = std::isnan(row.values[3]) ? 0 : row.values[3];
          s.tokens = std::isnan(row.values[5]) ? 0 : static_cast<int64_t>(row.values[5]);
          s.step_ms = std::isnan(row.values[6]) ? 0 : row.values[6];
          r.body = s;
          records.push_back(std::move(r));
        }
        if (!std::isnan(row.values[4])) {
          MetricsRecord r;
          r.type = MetricsRecordType::kEval;
          r.time = row.time;
          EvalRecord e;
          e.step = row.step;
          e.val_loss = static_cast<float>(row.values[4]);
          r.body = e;
          records.push_back(std::move(r));
        }
      }
    } catch (const std::exception& e) {
      QMetaObject::invokeMethod(
          this,
          [this, m = QString::fromUtf8(e.what())] {
            appendLog(QStringLiteral("warning"), tr("the stored metrics could not be read: %1").arg(m));
          },
          Qt::QueuedConnection);
      return;
    }
    m_feed->append(records);
    const qint64 upTo = static_cast<qint64>(m_feed->size());
    QMetaObject::invokeMethod(
        this, [this, upTo] { deliver(upTo); }, Qt::QueuedConnection);
  });
  m_thread->start();
}

void LocalRun::deliver(qint64 upTo) {
  if (upTo <= m_delivered) return;
  const std::vector<MetricsRecord> records =
      m_feed->copy(static_cast<size_t>(m_delivered), static_cast<size_t>(upTo));
  m_delivered = upTo;
  for (const MetricsRecord& r : records) handle(r);
  emit changed();
}

void LocalRun::stop() {
  if (m_state != State::Running) return;
  appendLog(
      QStringLiteral("info"),
      tr("stop requested (SIGTERM): the worker saves a checkpoint at its next step boundary, then exits"));
  m_stopRequested = true;
  setState(State::Stopping);
  m_stopFlag.store(true);
}

void LocalRun::checkpointNow() {
  if (m_state != State::Running) return;
  appendLog(QStringLiteral("info"),
            tr("checkpoint requested (SIGUSR1): the worker saves one at its next step boundary and goes on"));
  m_checkpointFlag.store(true);
}

void LocalRun::kill() {
  if (!isActive()) return;
  m_killRequested = true;
  appendLog(QStringLiteral("warning"),
            tr("kill requested (SIGKILL): progress since the last checkpoint is lost"));
  m_killFlag.store(true);
}

void LocalRun::detach() {
  if (!isActive()) return;
  m_leave.store(true);
  if (m_thread) m_thread->wait();  // returns within one poll: the watcher flushes and leaves
  deliver(static_cast<qint64>(m_feed->size()));
  appendLog(QStringLiteral("info"),
            tr("left running (pid %1): it keeps writing %2 after Flotilla closes").arg(m_pid).arg(m_runDir));
  m_endMs = m_clock.elapsed();
  setState(State::Detached);
}

void LocalRun::setStored(const flotilla::db::Run& run) {
  m_storedStart = run.started_at.value_or(0);
  m_storedEnd = run.ended_at.value_or(0);
  if (run.status != db::RunStatus::kRunning && run.status != db::RunStatus::kCreated) {
    m_endStatus = run.status;
    m_endNote = QString::fromStdString(run.status_note);
    if (run.exit_code) m_exitCode = static_cast<int>(*run.exit_code);
  }
}

qint64 LocalRun::elapsedMs() const {
  if (m_storedStart > 0) {  // the store's clock: the whole run, across sessions
    const bool ended = !isActive() && m_state != State::NotStarted && m_state != State::Detached;
    const double end = ended && m_storedEnd > 0
                           ? m_storedEnd
                           : static_cast<double>(QDateTime::currentMSecsSinceEpoch()) / 1000.0;
    return std::max<qint64>(0, static_cast<qint64>((end - m_storedStart) * 1000.0));
  }
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
    case State::Detached:
      return tr("left running");
    case State::Failed:
      if (m_endStatus == db::RunStatus::kRunning || (m_exitCode < 0 && !m_error.isEmpty()))
        return tr("failed (%1)").arg(m_error.isEmpty() ? tr("the worker could not be watched") : m_error);
      break;
    case State::Completed:
    case State::Stopped:
    case State::Killed:
      break;
  }
  // Ended: the store's status and note in the runs layer's words, as the Runs page and the CLI say.
  return QString::fromStdString(runs::status_text(m_endStatus, m_endNote.toStdString()));
}

runs::RunSpeed LocalRun::runSpeed() const {
  if (m_summary && m_summary->mean_tokens_per_s > 0) {
    runs::RunSpeed s;
    s.tokens_per_s = m_summary->mean_tokens_per_s;
    s.mfu = m_summary->mean_mfu;
    s.from_summary = true;
    return s;
  }
  if (m_storedSpeed) return *m_storedSpeed;
  return m_speed.value();
}

QString LocalRun::failureReason() const {
  if (m_state != State::Failed) return {};
  if (!m_lastError.isEmpty()) return m_lastError;
  if (!m_error.isEmpty()) return m_error;
  return m_endNote;
}

void LocalRun::handle(const MetricsRecord& r) {
  emit recordReceived(r);
  switch (r.type) {
    case MetricsRecordType::kStep: {
      if (r.rank != 0) return;
      const StepRecord& s = r.step();
      m_lastStep = s.step;
      m_lastLoss = static_cast<double>(s.loss);
      m_tokensPerSec = s.tokens_per_s;
      m_mfu = s.mfu;
      m_speed.add(s.step, s.tokens_per_s, s.mfu);
      m_series.append(QLatin1String(kSeriesLoss), double(s.step), m_lastLoss);
      m_series.append(QLatin1String(kSeriesLr), double(s.step), s.lr);
      m_series.append(QLatin1String(kSeriesTokensPerSec), double(s.step), m_tokensPerSec);
      m_series.append(QLatin1String(kSeriesMfu), double(s.step), m_mfu);
      emit stepReceived(s.step, m_lastLoss, s.lr, m_tokensPerSec, m_mfu);
      break;
    }
    case MetricsRecordType::kEval: {
      const EvalRecord& e = r.eval();
      m_lastValLoss = static_cast<double>(e.val_loss);
      m_series.append(QLatin1String(kSeriesValLoss), double(e.step), m_lastValLoss);
      appendLog(QStringLiteral("info"),
                tr("eval at step %1: validation loss %2").arg(e.step).arg(formatMetric(m_lastValLoss)));
      emit evalReceived(e.step, m_lastValLoss);
      break;
    }
    case MetricsRecordType::kCheckpoint: {
      const CheckpointRecord& c = r.checkpoint();
      m_lastCheckpoint = QString::fromStdString(c.dir);
      const double mb = static_cast<double>(c.bytes) / (1024.0 * 1024.0);
      appendLog(QStringLiteral("info"), tr("checkpoint at step %1 (%2): %3, %4 MiB in %5 s")
                                            .arg(c.step)
                                            .arg(QString::fromStdString(c.reason), m_lastCheckpoint)
                                            .arg(mb, 0, 'f', 1)
                                            .arg(c.seconds, 0, 'f', 2));
      emit checkpointReceived(c.step, m_lastCheckpoint);
      break;
    }
    case MetricsRecordType::kEvent: {
      const QString level = QString::fromStdString(r.event().level);
      const QString message = QString::fromStdString(r.event().message);
      if (level == QLatin1String("error")) m_lastError = message;
      appendLog(level, message);
      emit eventReceived(level, message);
      break;
    }
    case MetricsRecordType::kRunStart: {
      const RunStartRecord& s = r.run_start();
      if (s.planned_steps > 0) m_plannedSteps = s.planned_steps;
      QString text = tr("run %1 started: %2M parameters, %3 steps, world size %4")
                         .arg(QString::fromStdString(s.run))
                         .arg(static_cast<double>(s.parameters) / 1e6, 0, 'f', 2)
                         .arg(m_plannedSteps)
                         .arg(s.world_size);
      if (!s.resumed_from.empty())
        text += tr(", resumed from %1").arg(QString::fromStdString(s.resumed_from));
      appendLog(QStringLiteral("info"), text);
      break;
    }
    case MetricsRecordType::kSummary:
      m_summary = r.summary();
      appendLog(QStringLiteral("info"), tr("summary: %1").arg(summaryText()));
      break;
    case MetricsRecordType::kSample: {
      if (!m_decoder) {  // the run's tokenizer, found from its stored config
        std::string path;
        try {
          path = runs::run_tokenizer_path(
              flotilla::load_config_file(QDir(m_runDir).filePath(QStringLiteral("run.toml")).toStdString()));
        } catch (const std::exception&) {
          // No run.toml (the demo): the samples are shown as ids.
        }
        m_decoder = std::make_unique<runs::SampleDecoder>(path);
        if (!m_decoder->error().empty())
          appendLog(QStringLiteral("warning"),
                    tr("the run's tokenizer at %1 did not load (%2): samples are shown as ids")
                        .arg(QString::fromStdString(path), QString::fromStdString(m_decoder->error())));
      }
      const SampleRecord& s = r.sample();
      const QString text = QString::fromStdString(m_decoder->text(s.tokens, s.text));
      m_samples.append({s.step, text});
      emit sampleAppended(s.step, text);
      break;
    }
  }
}

void LocalRun::onEnded(const runs::LocalOutcome& out) {
  if (out.exit_code == runs::kLeft) return;  // detach() handles the rest
  m_exitCode = out.exit_code;
  m_exitStatus = out.signal > 0 ? QProcess::CrashExit : QProcess::NormalExit;
  m_endMs = m_clock.elapsed();
  if (m_storedStart > 0)
    m_storedEnd =
        out.end.at > 0 ? out.end.at : static_cast<double>(QDateTime::currentMSecsSinceEpoch()) / 1000.0;
  m_endNote = QString::fromStdString(out.end.note);
  m_endStatus = out.end.status;
  State next = State::Failed;
  switch (out.end.status) {
    case db::RunStatus::kCompleted:
      next = State::Completed;
      break;
    case db::RunStatus::kStopped:
    case db::RunStatus::kPreempted:
      next = m_killRequested ? State::Killed : State::Stopped;
      break;
    default:
      next = m_killRequested ? State::Killed : State::Failed;
      if (m_attached && next == State::Failed)
        m_error = tr("the worker (pid %1) ended without a summary record").arg(m_pid);
      break;
  }
  if (!out.stored_all || !out.recorded)
    appendLog(QStringLiteral("error"),
              tr("the run database could not store everything (%1); metrics.jsonl keeps every record, stored "
                 "once the database has space again")
                  .arg(QString::fromStdString(out.store_error)));
  if (next == State::Failed) {
    const QString tail = workerLogTail(8);
    if (!tail.isEmpty()) appendLog(QStringLiteral("error"), tr("last lines of worker.log:\n%1").arg(tail));
  }
  setState(next);
  appendLog(next == State::Failed ? QStringLiteral("error") : QStringLiteral("info"),
            tr("worker ended: %1").arg(stateText()));
  emit changed();
  emit finished(m_exitCode, m_exitStatus, summaryText());
}

void LocalRun::fail(const QString& why) {
  m_error = why;
  m_endStatus = flotilla::db::RunStatus::kFailed;
  appendLog(QStringLiteral("error"), m_error);
  m_endMs = m_clock.isValid() ? m_clock.elapsed() : 0;
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
  if (!m_summary) return tr("no summary record (the worker did not finish its run loop)");
  const SummaryRecord& s = *m_summary;
  return tr("%1 steps, final loss %2, best validation loss %3, %4 s, %5 tokens/s, exit %6")
      .arg(s.steps)
      .arg(formatMetric(s.final_loss))
      .arg(s.best_val_loss ? formatMetric(*s.best_val_loss) : tr("none"))
      .arg(s.wall_s, 0, 'f', 1)
      .arg(QLocale().toString(s.mean_tokens_per_s, 'f', 0))
      .arg(QString::fromStdString(s.exit));
}

QString LocalRun::workerLogTail(int maxLines) const {
  QStringList lines;
  for (const std::string& l : runs::worker_log_tail(m_runDir.toStdString(), maxLines))
    lines << QString::fromStdString(l);
  return lines.join(QLatin1Char('\n'));
}

}  // namespace flotilla::ui
