// One run on SSH nodes, driven from a worker thread (see remoterun.h): start, watch, stop and the
// records it shows. Re-attaching and the recovery policy are in remoterun_attach.cpp.
#include "ui/runs/remoterun.h"

#include <QCoreApplication>
#include <QDeadlineTimer>
#include <QDir>
#include <QMutex>
#include <QThread>
#include <QWaitCondition>

#include <cmath>
#include <cstdio>
#include <limits>

#include "db/ingest.h"
#include "db/queries.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "engine/core/error.h"
#include "flotilla/build_info.h"
#include "remote/node_fields.h"
#include "remote/remote_run.h"
#include "ui/common/numberformat.h"
#include "ui/runs/localrun.h"

namespace flotilla::ui {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// One question to the UI thread and its answer; the answer is wiped when the last owner lets go.
struct PassphraseAsk {
  QMutex mutex;
  QWaitCondition answered;
  bool done = false;
  bool abandoned = false;  // the thread stopped waiting (the run is being left): do not ask
  std::optional<std::string> answer;
  ~PassphraseAsk() {
    if (answer) wipeSecret(*answer);
  }
};

// The store status name of run `id` ("" when it cannot be read).
std::string storedStatus(const std::string& dbPath, int64_t id) {
  try {
    db::Database reader(dbPath);
    return db::to_string(db::get_run(reader, id).status);
  } catch (const std::exception&) {
    return "";
  }
}

QStringList splitTarget(const std::string& target) {
  return QString::fromStdString(target).split(QLatin1Char(','), Qt::SkipEmptyParts);
}

}  // namespace

RemoteRun::RemoteRun(const QString& name, const QString& databasePath, const QString& mirrorDir,
                     QObject* parent)
    : RunHandle(parent),
      m_name(name),
      m_databasePath(databasePath),
      m_mirrorDir(mirrorDir),
      m_lastLoss(kNaN),
      m_lastValLoss(kNaN) {}

RemoteRun::~RemoteRun() {
  if (m_thread) {
    m_leave.store(true);
    m_thread->wait();
    delete m_thread;
  }
}

bool RemoteRun::isFinished() const { return m_thread && m_thread->isFinished(); }

void RemoteRun::launch(std::function<void()> body) {
  Q_ASSERT(!m_thread);
  QDir().mkpath(m_mirrorDir);
  m_startedAt = QDateTime::currentDateTimeUtc();
  setState(State::Running);
  m_thread = QThread::create(std::move(body));
  m_thread->start();
}

std::optional<std::string> RemoteRun::askPassphrase(const std::string& node, const std::string& keyPath) {
  std::optional<std::string> out;
  if (!m_prompt || m_leave.load()) return out;
  auto ask = std::make_shared<PassphraseAsk>();
  // Posted to the application, not to this object, with a copy of the prompt: the dialog runs
  // in a nested event loop, during which this object may go away; the call touches only `ask`.
  QMetaObject::invokeMethod(
      QCoreApplication::instance(),
      [ask, prompt = m_prompt, n = QString::fromStdString(node), k = QString::fromStdString(keyPath)] {
        {
          QMutexLocker lock(&ask->mutex);
          if (ask->abandoned) return;
        }
        std::optional<std::string> typed = prompt(n, k);
        QMutexLocker lock(&ask->mutex);
        if (typed) {
          ask->answer.emplace(*typed);
          wipeSecret(*typed);
        }
        ask->done = true;
        ask->answered.wakeAll();
      },
      Qt::QueuedConnection);
  QMutexLocker lock(&ask->mutex);
  while (!ask->done && !m_leave.load()) ask->answered.wait(&ask->mutex, QDeadlineTimer(200));
  ask->abandoned = true;
  if (ask->done && ask->answer) {
    out.emplace(*ask->answer);
    wipeSecret(*ask->answer);
    ask->answer.reset();
  }
  return out;  // the session wipes it after one use
}

void RemoteRun::postLog(const QString& level, const std::string& text) {
  QMetaObject::invokeMethod(
      this, [this, level, t = QString::fromStdString(text)] { appendLog(level, t); }, Qt::QueuedConnection);
}

remote::SessionOptions RemoteRun::sessionOptions(const std::string& dbPath, const db::SshNode& node,
                                                 remote::PassphraseFn ask) {
  remote::SessionOptions o;
  o.host = node.host;
  o.port = node.port;
  o.user = node.user;
  o.identity_file = node.key_path;
  o.known_hosts_path = remote::workspace_known_hosts_path(dbPath);
  o.connect_timeout_s = 10;
  o.read_timeout_s = 15;
  o.keepalive_interval_s = 5;
  o.passphrase = std::move(ask);
  return o;
}

remote::SessionOptions RemoteRun::sessionOptionsFor(const db::SshNode& node) {
  return sessionOptions(m_databasePath.toStdString(), node, [this, name = node.name](const std::string& key) {
    return askPassphrase(name, key);
  });
}

void RemoteRun::postNodes(int64_t runId) {
  try {
    db::Database reader(m_databasePath.toStdString());
    const QStringList names = splitTarget(db::get_run(reader, runId).target);
    if (names.isEmpty()) return;
    QMetaObject::invokeMethod(
        this,
        [this, names] {
          m_nodes = names;
          emit changed();
        },
        Qt::QueuedConnection);
  } catch (const std::exception&) {
    // The node list shown stays as it was; the store has the truth.
  }
}

std::vector<runs::Node> RemoteRun::connectOnThread(db::Database& db, const std::vector<std::string>& names) {
  std::vector<runs::Node> nodes;
  for (const auto& n : names) nodes.push_back(runs::Node{db::get_ssh_node(db, n), nullptr, ""});
  std::string refused;
  if (!runs::connect_nodes(
          nodes, [&](const db::SshNode& rec) { return sessionOptionsFor(rec); },
          [&](const std::string& node, const remote::HostKeyError& e) {
            refused = "node " + node + ": " + e.what() + " (check the key and trust it on the Nodes page)";
          }))
    throw Error(ExitCode::kComm, refused);
  return nodes;
}

void RemoteRun::emitRecords(const std::vector<MetricsRecord>& records) {
  m_feed->append(records);
  const qint64 upTo = static_cast<qint64>(m_feed->size());
  QMetaObject::invokeMethod(
      this, [this, upTo] { deliver(upTo); }, Qt::QueuedConnection);
}

void RemoteRun::replayHistory(remote::Session& session, const std::string& rid, uint64_t historyUpTo) {
  for (uint64_t at = 0; at < historyUpTo && !m_leave.load();) {
    const remote::TailChunk t = remote::tail_run_file(session, rid, at);
    if (t.lines.empty()) break;
    std::vector<MetricsRecord> take;
    bool past = false;
    for (const auto& l : t.lines) {
      if (at + l.size() + 1 > historyUpTo) {
        past = true;
        break;
      }
      at += l.size() + 1;
      MetricsRecord r;
      if (parse_metrics_line(l, r) == ParseStatus::kRecord) take.push_back(std::move(r));
    }
    emitRecords(take);
    if (past) break;
  }
}

runs::WatchHooks RemoteRun::watchHooks(int64_t runId) {
  runs::WatchHooks hooks;
  hooks.note = [this, runId](const std::string& line) {
    postLog(QStringLiteral("warning"), line);
    QMetaObject::invokeMethod(
        this,
        [this, n = QString::fromStdString(line)] {
          m_note = n;
          emit changed();
        },
        Qt::QueuedConnection);
    // A recovery has just recorded the run's new nodes: show them.
    if (line.rfind("automatic recovery ", 0) == 0) postNodes(runId);
  };
  hooks.on_budget = [this](const db::BudgetStatus& b) {
    postBudget(b.message, b.action == db::BudgetAction::kStop);
  };
  hooks.on_committed = [this](const std::vector<MetricsRecord>& records, uint64_t) { emitRecords(records); };
  hooks.stop_requested = [this] { return m_stopFlag.load(); };
  hooks.checkpoint_requested = [this] { return m_checkpointFlag.exchange(false); };
  hooks.leave_requested = [this] { return m_leave.load(); };
  return hooks;
}

void RemoteRun::postEnded(int code, int64_t runId, bool slurm) {
  QString status =
      code == runs::kLeft ? QStringLiteral("left") : QString::fromStdString(storedStatus(m_databasePath.toStdString(), runId));
  if (slurm && (status == QLatin1String("queued") || status == QLatin1String("running") ||
                status == QLatin1String("preempted")))
    status = QStringLiteral("left");
  QMetaObject::invokeMethod(
      this, [this, code, status] { onEnded(code, status, {}); }, Qt::QueuedConnection);
}

void RemoteRun::watchOnThread(std::vector<runs::Node>& nodes, const runs::Watch& w, uint64_t historyUpTo,
                              const runs::Recovery& recovery) {
  // History already in the store (a re-attach): shown, not stored again.
  replayHistory(*nodes[0].session, w.rid, historyUpTo);
  db::Writer writer(m_databasePath.toStdString());
  postEnded(runs::supervise_node_run(writer, nodes, w, watchHooks(w.run_id), recovery), w.run_id);
}

void RemoteRun::failOnThread(int64_t runId, const std::string& what) {
  if (runId > 0) {
    try {
      db::Database db(m_databasePath.toStdString());
      runs::RunEnd end;
      end.status = db::RunStatus::kFailed;
      end.note = what;
      end.reason = "flotilla app: " + what;
      end.exit_code = -1;
      runs::record_end(db, runId, end);
    } catch (const std::exception&) {
    }
  }
  QMetaObject::invokeMethod(
      this, [this, e = QString::fromStdString(what)] { onEnded(-1, QStringLiteral("failed"), e); },
      Qt::QueuedConnection);
}

void RemoteRun::start(const RunConfig& config, const QStringList& nodes, const QString& workerPath,
                      const RecoveryChoice& recovery) {
  m_nodes = nodes;
  m_workerPath = workerPath;
  m_recovery = recovery;
  appendLog(QStringLiteral("info"), tr("deploying and starting on %1").arg(nodes.join(QStringLiteral(", "))));
  if (recovery.enabled)
    appendLog(QStringLiteral("info"),
              recovery.spares.isEmpty()
                  ? tr("automatic recovery after a preemption: on (at most %1 times; no spare node: a lost "
                       "node's ranks move to the nodes that remain)")
                        .arg(recovery.maxRecoveries)
                  : tr("automatic recovery after a preemption: on (at most %1 times; spare nodes %2)")
                        .arg(recovery.maxRecoveries)
                        .arg(recovery.spares.join(QStringLiteral(", "))));
  runs::StartRequest req;
  req.config = config;
  req.name = m_name.toStdString();
  req.worker_path = workerPath.toStdString();
  req.version = FLOTILLA_VERSION_STRING;
  req.origin = "flotilla app";
  std::vector<std::string> names;
  for (const QString& n : nodes) names.push_back(n.toStdString());
  launch([this, req, names, recovery] {
    int64_t runId = 0;
    try {
      db::Database db(m_databasePath.toStdString());
      std::vector<runs::Node> connected = connectOnThread(db, names);
      const runs::Watch w = runs::start_on_nodes(
          db, connected, req, [this](const std::string& line) { postLog(QStringLiteral("info"), line); });
      runId = w.run_id;
      // The choice goes with the run: a watcher that re-attaches later follows it too.
      runs::record_recovery_policy(
          db, runId, runs::recovery_policy_from_json(recoveryPolicyJson(recovery).toStdString()));
      QMetaObject::invokeMethod(
          this,
          [this, runId] {
            m_storeId = runId;
            emit storeIdKnown(runId);
          },
          Qt::QueuedConnection);
      watchOnThread(connected, w, 0, recoveryOnThread(db, recovery, names));
    } catch (const std::exception& e) {
      failOnThread(runId, e.what());
    }
  });
}

void RemoteRun::deliver(qint64 upTo) {
  if (upTo <= m_delivered) return;
  const std::vector<MetricsRecord> records =
      m_feed->copy(static_cast<size_t>(m_delivered), static_cast<size_t>(upTo));
  m_delivered = upTo;
  for (const MetricsRecord& r : records) handle(r);
  emit changed();
}

void RemoteRun::handle(const MetricsRecord& r) {
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
      m_series.append(QLatin1String(kSeriesLoss), double(s.step), m_lastLoss);
      m_series.append(QLatin1String(kSeriesLr), double(s.step), s.lr);
      m_series.append(QLatin1String(kSeriesTokensPerSec), double(s.step), m_tokensPerSec);
      m_series.append(QLatin1String(kSeriesMfu), double(s.step), m_mfu);
      break;
    }
    case MetricsRecordType::kEval:
      m_lastValLoss = static_cast<double>(r.eval().val_loss);
      m_series.append(QLatin1String(kSeriesValLoss), double(r.eval().step), m_lastValLoss);
      appendLog(QStringLiteral("info"),
                tr("eval at step %1: validation loss %2").arg(r.eval().step).arg(formatMetric(m_lastValLoss)));
      break;
    case MetricsRecordType::kCheckpoint:
      appendLog(QStringLiteral("info"), tr("checkpoint at step %1: %2")
                                            .arg(r.checkpoint().step)
                                            .arg(QString::fromStdString(r.checkpoint().dir)));
      break;
    case MetricsRecordType::kEvent:
      appendLog(QString::fromStdString(r.event().level), QString::fromStdString(r.event().message));
      break;
    case MetricsRecordType::kRunStart:
      if (r.run_start().planned_steps > 0) m_plannedSteps = r.run_start().planned_steps;
      break;
    default:
      break;
  }
}

void RemoteRun::onEnded(int exitCode, const QString& status, const QString& error) {
  m_exitCode = exitCode;
  m_error = error;
  m_endedAt = QDateTime::currentDateTimeUtc();
  State next = State::Failed;
  if (status == QLatin1String("completed"))
    next = State::Completed;
  else if (status == QLatin1String("stopped") || status == QLatin1String("preempted"))
    next = State::Stopped;
  else if (status == QLatin1String("left") || status == QLatin1String("running"))
    next = State::Detached;
  if (!error.isEmpty())
    appendLog(QStringLiteral("error"), error);
  else
    appendLog(QStringLiteral("info"), m_cluster.isEmpty()
                                          ? tr("run on nodes ended: %1").arg(status)
                                          : tr("run on cluster %1 ended: %2").arg(m_cluster, status));
  setState(next);
  emit finished(exitCode);
}

void RemoteRun::stop() {
  if (m_state != State::Running) return;
  m_stopFlag.store(true);
  appendLog(QStringLiteral("info"), tr("stopping the run on every node (checkpoint, then exit)"));
  setState(State::Stopping);
}

void RemoteRun::kill() { stop(); }

void RemoteRun::checkpointNow() {
  if (m_state != State::Running) return;
  m_checkpointFlag.store(true);
  appendLog(QStringLiteral("info"), tr("asking the master node for a checkpoint at the next step"));
}

qint64 RemoteRun::elapsedMs() const {
  if (!m_startedAt.isValid()) return 0;
  return m_startedAt.msecsTo(m_endedAt.isValid() ? m_endedAt : QDateTime::currentDateTimeUtc());
}

QString RemoteRun::stateText() const {
  QString where;
  if (!m_cluster.isEmpty())
    where = m_jobId.isEmpty() ? tr(" on cluster %1").arg(m_cluster) : tr(" on cluster %1 (job %2)").arg(m_cluster, m_jobId);
  else if (!m_nodes.isEmpty())
    where = tr(" on %1").arg(m_nodes.join(QStringLiteral(", ")));
  switch (m_state) {
    case State::NotStarted:
      return tr("not started");
    case State::Running:
      return m_note.isEmpty() ? tr("running%1").arg(where) : tr("running%1 · %2").arg(where, m_note);
    case State::Stopping:
      return tr("stopping%1…").arg(where);
    case State::Completed:
      return tr("completed");
    case State::Stopped:
      return tr("stopped (exit %1)").arg(m_exitCode);
    case State::Killed:
      return tr("killed");
    case State::Detached:
      return tr("left running%1").arg(where);
    case State::Failed:
      return m_error.isEmpty() ? tr("failed: exit %1").arg(m_exitCode) : tr("failed: %1").arg(m_error);
  }
  return {};
}

void RemoteRun::appendLog(const QString& level, const QString& text) {
  m_log.append({level, text});
  emit logAppended(level, text);
}

void RemoteRun::setState(State state) {
  if (state == m_state) return;
  m_state = state;
  emit stateChanged(state);
}

}  // namespace flotilla::ui
