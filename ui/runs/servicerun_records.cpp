// One run as the app shows it (see servicerun.h), continued: what the UI thread makes of what the
// run's thread delivers. Each record in turn (the latest step, loss, speed and series, the log's
// lines, the samples decoded with the run's tokenizer), the end as the watcher or the store reports
// it, and the words and figures the pages read (state, elapsed time, speed, failure, summary).
// Opening, watching and following the run on its thread, and the requests: servicerun.cpp.
#include "ui/runs/servicerun.h"

#include <QDateTime>
#include <QDir>
#include <QLocale>

#include <algorithm>

#include "engine/config/config_io.h"
#include "engine/core/error.h"
#include "engine/core/stop_request.h"
#include "engine/eval/task.h"
#include "runs/process.h"
#include "runs/run_status.h"
#include "ui/common/numberformat.h"

namespace flotilla::ui {

void ServiceRun::setStored(const flotilla::db::Run& run) {
  m_storedStart = run.started_at.value_or(0);
  m_storedEnd = run.ended_at.value_or(0);
  if (m_runDir.isEmpty()) {
    m_runDir = QString::fromStdString(run.run_dir);
    m_folderHere = !m_runDir.isEmpty() && QDir(m_runDir).exists();
  }
  if (m_where.isEmpty()) m_where = QString::fromStdString(runs::RunService::where_text(run));
  if (run.status != db::RunStatus::kRunning && run.status != db::RunStatus::kCreated &&
      run.status != db::RunStatus::kQueued) {
    m_endStatus = run.status;
    m_endNote = QString::fromStdString(run.status_note);
    if (run.exit_code) m_exitCode = static_cast<int>(*run.exit_code);
  }
}

qint64 ServiceRun::elapsedMs() const {
  if (m_storedRunningAt > 0) {  // the store's running time, as Runs, Compare, Costs and the CLI say
    double s = m_storedRunningS;
    if (m_storedRunningOpen && isActive())
      s += std::max(0.0,
                    static_cast<double>(QDateTime::currentMSecsSinceEpoch()) / 1000.0 - m_storedRunningAt);
    return static_cast<qint64>(s * 1000.0);
  }
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

QString ServiceRun::stateText() const {
  // A run here goes without saying; another place is named while the run goes on there.
  const QString where = placeText().isEmpty() ? QString() : tr(" on %1").arg(placeText());
  switch (m_state) {
    case State::NotStarted:
      return tr("not started");
    case State::Running:
      return m_note.isEmpty() ? tr("running%1").arg(where) : tr("running%1 · %2").arg(where, m_note);
    case State::Stopping:
      return tr("stopping%1…").arg(where);
    case State::Detached:
      return tr("left running%1").arg(where);
    case State::Failed:
      if (m_endStatus == db::RunStatus::kRunning || (m_exitCode < 0 && !m_error.isEmpty()))
        return tr("failed (%1)").arg(m_error.isEmpty() ? tr("the run could not be watched") : m_error);
      break;
    case State::Completed:
    case State::Stopped:
    case State::Killed:
      break;
  }
  // Ended: the store's status and note in the runs layer's words, as the Runs page and the CLI say.
  return QString::fromStdString(runs::status_text(m_endStatus, m_endNote.toStdString()));
}

runs::RunSpeed ServiceRun::runSpeed() const {
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

QString ServiceRun::failureReason() const {
  if (m_state != State::Failed) return {};
  if (!m_lastError.isEmpty()) return m_lastError;
  if (!m_error.isEmpty()) return m_error;
  return m_endNote;
}

void ServiceRun::handle(const MetricsRecord& r) {
  emit recordReceived(r);
  switch (r.type) {
    case MetricsRecordType::kStep: {
      if (r.rank != 0) return;
      const StepRecord& s = r.step();
      m_note.clear();  // training goes on: whatever the watcher noted is over
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
      appendLog(QStringLiteral("info"),
                tr("checkpoint at step %1 (%2): %3, %4 MiB in %5 s")
                    .arg(c.step)
                    .arg(QString::fromStdString(checkpoint_reason_words(c.reason)), m_lastCheckpoint)
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
    case MetricsRecordType::kTask: {
      const TaskRecord& t = r.task();
      appendLog(QStringLiteral("info"), tr("task %1 at step %2: %3")
                                            .arg(QString::fromStdString(t.task))
                                            .arg(t.step)
                                            .arg(QString::fromStdString(eval::scores_line(t.scores))));
      break;
    }
    case MetricsRecordType::kComm:  // communication figures: the Live page reads them from the store
      break;
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
          // No run.toml here (the demo, a run elsewhere): the samples are shown as ids.
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

void ServiceRun::onEnded(const runs::WatchResult& out, const QString& error) {
  if (out.exit_code == runs::kLeft && m_leave.load()) return;  // detach() handles the rest
  m_exitCode = out.exit_code;
  m_exitStatus = out.signal > 0 ? QProcess::CrashExit : QProcess::NormalExit;
  m_endMs = m_clock.elapsed();
  if (!error.isEmpty()) m_error = error;
  if (m_storedStart > 0)
    m_storedEnd =
        out.end.at > 0 ? out.end.at : static_cast<double>(QDateTime::currentMSecsSinceEpoch()) / 1000.0;
  m_endNote = QString::fromStdString(out.end.note);
  m_endStatus = out.end.status;
  State next = State::Failed;
  // The watcher gave the run up (its place unreachable, a job still queued): it goes on there.
  const bool left = out.exit_code == runs::kLeft ||
                    (!out.recorded && error.isEmpty() && out.exit_code == static_cast<int>(ExitCode::kComm));
  if (left) {
    next = State::Detached;
  } else {
    switch (out.end.status) {
      case db::RunStatus::kCompleted:
        next = State::Completed;
        break;
      case db::RunStatus::kStopped:
      case db::RunStatus::kPreempted:
        next = m_killRequested ? State::Killed : State::Stopped;
        break;
      case db::RunStatus::kRunning:
      case db::RunStatus::kQueued:
        next = State::Detached;
        break;
      default:
        next = m_killRequested ? State::Killed : State::Failed;
        break;
    }
  }
  if (!out.stored_all || (!out.recorded && !left))
    appendLog(QStringLiteral("error"),
              tr("the run database could not store everything (%1); metrics.jsonl keeps every record, stored "
                 "once the database has space again")
                  .arg(QString::fromStdString(out.store_error)));
  if (next == State::Failed) {
    if (!m_error.isEmpty()) appendLog(QStringLiteral("error"), m_error);
    const QString tail = workerLogTail(8);
    if (!tail.isEmpty()) appendLog(QStringLiteral("error"), tr("last lines of worker.log:\n%1").arg(tail));
  }
  setState(next);
  appendLog(next == State::Failed ? QStringLiteral("error") : QStringLiteral("info"),
            left
                ? tr("no longer watched: the run goes on on %1; open it from the Runs page to watch it again")
                      .arg(m_where)
                : tr("worker ended: %1").arg(stateText()));
  emit changed();
  emit finished(m_exitCode, m_exitStatus, summaryText());
}

void ServiceRun::fail(const QString& why) {
  m_error = why;
  m_endStatus = flotilla::db::RunStatus::kFailed;
  appendLog(QStringLiteral("error"), m_error);
  m_endMs = m_clock.isValid() ? m_clock.elapsed() : 0;
  setState(State::Failed);
  emit changed();
  emit finished(-1, QProcess::CrashExit, m_error);
}

void ServiceRun::setState(State state) {
  if (state == m_state) return;
  m_state = state;
  emit stateChanged(state);
}

void ServiceRun::appendLog(const QString& level, const QString& text) {
  m_log.append({level, text});
  emit logAppended(level, text);
}

QString ServiceRun::summaryText() const {
  if (!m_summary) return tr("no summary record (the worker did not finish its run loop)");
  const SummaryRecord& s = *m_summary;
  // How it ended in the worker's words when it stopped early ("stopped on request (flotilla app)",
  // "budget reached: ..."); else its exit ("completed"). A record from before issue 34 says
  // "preempted" for a Stop too: the status beside it says who asked.
  return tr("%1 steps, final loss %2, best validation loss %3, %4 s in the worker, %5 tokens/s, %6")
      .arg(s.steps)
      .arg(formatMetric(s.final_loss))
      .arg(s.best_val_loss ? formatMetric(*s.best_val_loss) : tr("none"))
      .arg(QString::number(s.wall_s, 'f', 1))
      .arg(QLocale().toString(s.mean_tokens_per_s, 'f', 0))
      .arg(s.stop_reason.empty() ? tr("exit %1").arg(QString::fromStdString(s.exit))
                                 : QString::fromStdString(s.stop_reason));
}

QString ServiceRun::workerLogTail(int maxLines) const {
  if (m_runDir.isEmpty() || !QDir(m_runDir).exists()) return {};
  QStringList lines;
  for (const std::string& l : runs::worker_log_tail(m_runDir.toStdString(), maxLines))
    lines << QString::fromStdString(l);
  return lines.join(QLatin1Char('\n'));
}

}  // namespace flotilla::ui
