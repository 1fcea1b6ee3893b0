// One run as the app shows it (see servicerun.h): the runs service's lifecycle on a thread of the
// run's own, its records and notes posted to the UI thread. This file: opening the run, watching or
// following it on its thread, the store reads that feed it, and the requests (stop, checkpoint,
// kill, leave). What the UI thread makes of the records and the end: servicerun_records.cpp.
#include "ui/runs/servicerun.h"

#include <QCoreApplication>
#include <QDeadlineTimer>
#include <QDir>
#include <QMetaObject>
#include <QMutex>
#include <QThread>
#include <QWaitCondition>

#include <limits>

#include "db/database.h"
#include "db/queries.h"
#include "db/run_records.h"
#include "runs/node_run.h"
#include "runs/process.h"
#include "runs/store_feed.h"

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

QStringList toQt(const std::vector<std::string>& list) {
  QStringList out;
  for (const auto& s : list) out << QString::fromStdString(s);
  return out;
}

db::Database openReader(const std::string& path) {
  db::OpenOptions o;
  o.create = false;
  o.quick_check = false;
  return db::Database(path, o);
}

}  // namespace

runs::RecoveryChoice toRunsRecovery(const RecoveryChoice& choice) {
  runs::RecoveryChoice r;
  r.enabled = choice.enabled;
  for (const QString& n : choice.spares) r.spares.push_back(n.toStdString());
  r.max_recoveries = choice.maxRecoveries;
  r.settle_seconds = choice.settleSeconds;
  r.mirror = choice.mirrorCheckpoints;
  return r;
}

RecoveryChoice fromRunsRecovery(const runs::RecoveryChoice& r) {
  RecoveryChoice c;
  c.enabled = r.enabled;
  c.spares = toQt(r.spares);
  c.maxRecoveries = r.max_recoveries;
  c.settleSeconds = r.settle_seconds;
  c.mirrorCheckpoints = r.mirror;
  return c;
}

const char* const kRecoveryPolicyEvent = runs::kRecoveryPolicyEvent;

QString recoveryPolicyJson(const RecoveryChoice& choice) {
  runs::RecoveryPolicy p;
  p.enabled = choice.enabled;
  for (const QString& n : choice.spares) p.spares.push_back(n.toStdString());
  p.max_recoveries = choice.maxRecoveries;
  p.settle_seconds = choice.settleSeconds;
  p.mirror = choice.mirrorCheckpoints;
  return QString::fromStdString(runs::recovery_policy_json(p));
}

RecoveryChoice recoveryChoiceFromJson(const QString& fieldsJson) {
  const runs::RecoveryPolicy p = runs::recovery_policy_from_json(fieldsJson.toStdString());
  RecoveryChoice c;
  c.enabled = p.enabled;
  c.spares = toQt(p.spares);
  c.maxRecoveries = p.max_recoveries;
  c.settleSeconds = p.settle_seconds;
  c.mirrorCheckpoints = p.mirror;
  return c;
}

// What the UI thread learns once the service has opened the run.
struct ServiceRun::Opened {
  qint64 id = 0;
  QString name, where, folder, commandLine, jobId, checkpointRefusal, cluster;
  QStringList nodes;
  qint64 pid = 0, totalSteps = 0;
  bool runningWhenFound = true;
  std::optional<db::Run> stored;
  std::optional<RecoveryChoice> recovery;
};

// The store reader of a run's thread: its connection and its cursors (runs/store_feed.h).
struct ServiceRun::StoreFollow {
  std::optional<runs::StoreFeedReader> reader;
  std::optional<db::Database> db;
  bool warned = false;  // a read failed and the log said so
};

ServiceRun::ServiceRun(const QString& name, const runs::ServiceOptions& options, QObject* parent)
    : RunHandle(parent),
      m_name(name),
      m_options(options),
      m_follow(std::make_unique<StoreFollow>()),
      m_lastLoss(kNaN),
      m_lastValLoss(kNaN) {
  // This run's own passphrase question: it gives up when the run is being left.
  m_options.ssh.passphrase = [this](const std::string& node, const std::string& key) {
    return askPassphrase(node, key);
  };
}

ServiceRun::~ServiceRun() {
  if (m_thread) {
    // Torn down while still watched (not detached, no close question: a test, a crash path): a
    // worker process of this machine is ended rather than orphaned unwatched, as before; a run
    // elsewhere goes on there and the next start re-attaches it.
    if (!m_thread->isFinished() && !m_leave.load() && m_pid > 0 && isActive())
      m_killFlag.store(true);
    else
      m_leave.store(true);
    m_thread->wait();
    delete m_thread;
  }
}

void ServiceRun::setPlacement(const runs::Placement& where) {
  m_checkpointRefusal = QString::fromStdString(runs::RunService::checkpoint_refusal(where));
  m_nodes = toQt(where.nodes);
  m_cluster = QString::fromStdString(where.cluster);
  m_recovery = fromRunsRecovery(where.recovery);
}

qint64 ServiceRun::liveWorkerPid(const QString& runDir) {
  return runs::live_worker_pid(runDir.toStdString());
}

bool ServiceRun::isFinished() const { return m_thread && m_thread->isFinished(); }

QString ServiceRun::metricsPath() const {
  return m_runDir.isEmpty() ? QString() : QDir(m_runDir).filePath(QString::fromLatin1(runs::kMetricsFile));
}
QString ServiceRun::workerLogPath() const {
  return m_runDir.isEmpty() ? QString() : QDir(m_runDir).filePath(QString::fromLatin1(runs::kWorkerLogFile));
}

std::optional<std::string> ServiceRun::askPassphrase(const std::string& node, const std::string& keyPath) {
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

void ServiceRun::postLog(const QString& level, const std::string& text) {
  QMetaObject::invokeMethod(
      this, [this, level, t = QString::fromStdString(text)] { appendLog(level, t); }, Qt::QueuedConnection);
}

ServiceRun::Opened ServiceRun::describe(runs::ActiveRun& active) const {
  Opened o;
  o.id = active.id();
  o.name = QString::fromStdString(active.name());
  o.where = QString::fromStdString(active.where_text());
  o.folder = QString::fromStdString(active.folder_text());
  o.commandLine = QString::fromStdString(active.command_line());
  o.jobId = QString::fromStdString(active.job_id());
  o.checkpointRefusal = QString::fromStdString(active.checkpoint_refusal());
  o.totalSteps = active.total_steps();
  o.runningWhenFound = active.running_when_found();
  o.pid = active.local_pid();
  if (o.id > 0 && !m_options.ssh.database_path.empty()) {
    try {
      const db::Database reader = openReader(m_options.ssh.database_path);
      o.stored = db::get_run(reader, o.id);
      const runs::Placement place = runs::RunService::placement_of(*o.stored);
      o.nodes = toQt(place.nodes);
      o.cluster = QString::fromStdString(place.cluster);
      const runs::RecoveryPolicy p = runs::stored_recovery_policy(reader, o.id);
      RecoveryChoice c;
      c.enabled = p.enabled;
      c.spares = toQt(p.spares);
      c.maxRecoveries = p.max_recoveries;
      c.settleSeconds = p.settle_seconds;
      c.mirrorCheckpoints = p.mirror;
      o.recovery = c;
    } catch (const std::exception&) {
      // The store answers the next time; what the service said is shown meanwhile.
    }
  }
  return o;
}

void ServiceRun::onOpened(const Opened& o) {
  const bool idChanged = o.id > 0 && o.id != m_storeId;
  if (o.id > 0) m_storeId = o.id;
  if (!o.name.isEmpty()) m_name = o.name;
  m_where = o.where;
  m_runDir = o.folder;
  m_folderHere = !m_runDir.isEmpty() && QDir(m_runDir).exists();
  m_commandLine = o.commandLine;
  m_pid = o.pid;
  m_jobId = o.jobId;
  m_checkpointRefusal = o.checkpointRefusal;
  if (!o.nodes.isEmpty() || !o.cluster.isEmpty()) {
    m_nodes = o.nodes;
    m_cluster = o.cluster;
  }
  if (o.recovery) m_recovery = *o.recovery;
  // A started run says its length in its run_start record; one found going may have said it already.
  if (m_showStored && m_plannedSteps == 0) m_plannedSteps = o.totalSteps;
  if (o.stored) {
    m_storedStart = o.stored->started_at.value_or(0);
    m_storedEnd = 0;
  }
  if (!m_commandLine.isEmpty()) appendLog(QStringLiteral("info"), tr("$ %1").arg(m_commandLine));
  if (m_pid > 0)
    appendLog(QStringLiteral("info"),
              tr("worker started (pid %1); its output goes to %2").arg(m_pid).arg(workerLogPath()));
  else if (m_showStored)
    appendLog(QStringLiteral("info"),
              o.runningWhenFound
                  ? tr("re-attached to %1 (%2): the run is still going").arg(m_where, m_runDir)
                  : tr("re-attached to %1 (%2): the run already ended").arg(m_where, m_runDir));
  else
    appendLog(QStringLiteral("info"), tr("%1 on %2 (%3)").arg(m_name, m_where, m_runDir));
  logRecovery();
  if (idChanged) emit storeIdKnown(m_storeId);
  emit changed();
}

void ServiceRun::logRecovery() {
  if (!m_recovery.enabled || m_recoveryLogged) return;
  m_recoveryLogged = true;
  appendLog(QStringLiteral("info"),
            m_recovery.spares.isEmpty()
                ? tr("automatic recovery after a preemption: on (at most %1 times; no spare node: a lost "
                     "node's ranks move to the nodes that remain)")
                      .arg(m_recovery.maxRecoveries)
                : tr("automatic recovery after a preemption: on (at most %1 times; spare nodes %2)")
                      .arg(m_recovery.maxRecoveries)
                      .arg(m_recovery.spares.join(QStringLiteral(", "))));
}

void ServiceRun::open(Open how, const QString& what, bool onThisThread, bool showStored) {
  Q_ASSERT(m_state == State::NotStarted && !m_thread);
  m_showStored = showStored;
  m_watched = true;
  m_startedAt = QDateTime::currentDateTime();
  m_clock.start();
  if (!what.isEmpty()) appendLog(QStringLiteral("info"), what);
  logRecovery();
  setState(State::Running);
  std::shared_ptr<runs::ActiveRun> active;
  if (onThisThread) {
    try {
      runs::RunService service(m_options);
      active = how(service, [this](const std::string& line) {
        appendLog(QStringLiteral("info"), QString::fromStdString(line));
      });
    } catch (const std::exception& e) {
      fail(QString::fromUtf8(e.what()));
      return;
    }
    onOpened(describe(*active));
    how = nullptr;
  }
  m_thread = QThread::create([this, how, active] { run(how, active); });
  m_thread->start();
}

void ServiceRun::run(Open how, std::shared_ptr<runs::ActiveRun> active) {
  if (!active) {
    try {
      runs::RunService service(m_options);
      active = how(service, [this](const std::string& line) { postLog(QStringLiteral("info"), line); });
    } catch (const std::exception& e) {
      QMetaObject::invokeMethod(
          this, [this, e = QString::fromUtf8(e.what())] { fail(e); }, Qt::QueuedConnection);
      return;
    }
    Opened o = describe(*active);
    QMetaObject::invokeMethod(
        this, [this, o] { onOpened(o); }, Qt::QueuedConnection);
  }
  // A stored run's records are the store's, from its first step: what it holds already (an
  // attached or resumed run's history) now, then what each commit adds.
  const qint64 storedId = m_options.ssh.database_path.empty() ? 0 : active->id();
  if (storedId > 0) pullStore(storedId);
  runs::WatchHooks hooks;
  watchHooks(hooks, storedId);
  runs::WatchResult result;
  QString error;
  try {
    result = active->watch(hooks);
  } catch (const std::exception& e) {
    result.exit_code = -1;
    result.end.status = db::RunStatus::kFailed;
    result.end.note = e.what();
    error = QString::fromUtf8(e.what());
  }
  active.reset();                         // closes its sessions on this thread
  if (storedId > 0) pullStore(storedId);  // the last lines, stored before the end was recorded
  const qint64 upTo = static_cast<qint64>(m_feed->size());
  QMetaObject::invokeMethod(
      this,
      [this, result, error, upTo] {
        deliver(upTo);
        onEnded(result, error);
      },
      Qt::QueuedConnection);
}

void ServiceRun::watchHooks(runs::WatchHooks& hooks, qint64 storedId) {
  hooks.note = [this](const std::string& line) {
    postLog(QStringLiteral("warning"), line);
    QMetaObject::invokeMethod(
        this,
        [this, n = QString::fromStdString(line)] {
          m_note = n;
          emit changed();
        },
        Qt::QueuedConnection);
    // A recovery may have moved the run: show where it is now, as the store has it.
    if (m_storeId > 0 && !m_options.ssh.database_path.empty()) {
      try {
        const db::Database reader = openReader(m_options.ssh.database_path);
        const db::Run run = db::get_run(reader, m_storeId);
        const runs::Placement place = runs::RunService::placement_of(run);
        QMetaObject::invokeMethod(
            this,
            [this, nodes = toQt(place.nodes),
             where = QString::fromStdString(runs::RunService::where_text(run))] {
              if (!nodes.isEmpty()) m_nodes = nodes;
              m_where = where;
              emit changed();
            },
            Qt::QueuedConnection);
      } catch (const std::exception&) {
      }
    }
  };
  hooks.on_budget = [this](const db::BudgetStatus& b) {
    postBudget(b.message, b.action == db::BudgetAction::kStop);
  };
  // A commit: the store holds more of the run; read it from there (a run with no store: the
  // watcher's records are all there is).
  hooks.on_committed = [this, storedId](const std::vector<MetricsRecord>& records, uint64_t) {
    if (storedId > 0)
      pullStore(storedId);
    else
      emitRecords(records);
  };
  hooks.stop_requested = [this] { return m_stopFlag.load(); };
  hooks.checkpoint_requested = [this] { return m_checkpointFlag.exchange(false); };
  hooks.kill_requested = [this] { return m_killFlag.load(); };
  hooks.leave_requested = [this] { return m_leave.load(); };
}

void ServiceRun::emitRecords(const std::vector<MetricsRecord>& records) {
  if (records.empty()) return;
  m_feed->append(records);
  const qint64 upTo = static_cast<qint64>(m_feed->size());
  QMetaObject::invokeMethod(
      this, [this, upTo] { deliver(upTo); }, Qt::QueuedConnection);
}

bool ServiceRun::pullStore(qint64 id) {
  StoreFollow& f = *m_follow;
  try {
    if (!f.reader || f.reader->run_id() != id) f.reader.emplace(id);
    if (!f.db) {
      db::OpenOptions o;
      o.create = false;
      o.quick_check = false;
      f.db.emplace(m_options.ssh.database_path, o);
    }
    runs::StoreRead read = f.reader->read(*f.db);
    emitRecords(read.records);
    // The run's running time as every page and command gives it (db::run_time_running: the union
    // of its cost intervals, across attempts); elapsedMs() goes on from it while the run does.
    const double at = db::now_seconds();
    const double running = db::run_time_running(*f.db, read.run);
    QMetaObject::invokeMethod(
        this,
        [this, running, at, open = !read.ended] {
          m_storedRunningS = running;
          m_storedRunningAt = at;
          m_storedRunningOpen = open;
        },
        Qt::QueuedConnection);
    if (m_followed)
      QMetaObject::invokeMethod(
          this, [this, run = read.run, ended = read.ended] { onStoredRow(run, ended); },
          Qt::QueuedConnection);
    return read.ended;
  } catch (const std::exception& e) {
    f.db.reset();  // opened again on the next read
    if (!f.warned) {
      f.warned = true;
      postLog(QStringLiteral("warning"), std::string("the run's stored metrics could not be read (") +
                                             e.what() +
                                             "); the page shows them once the run database answers again");
    }
    return false;
  }
}

ServiceRun::State ServiceRun::stateOf(db::RunStatus status) {
  switch (status) {
    case db::RunStatus::kCompleted:
      return State::Completed;
    case db::RunStatus::kFailed:
      return State::Failed;
    case db::RunStatus::kStopped:
    case db::RunStatus::kPreempted:
      return State::Stopped;
    case db::RunStatus::kCreated:
    case db::RunStatus::kQueued:
    case db::RunStatus::kRunning:
    case db::RunStatus::kPaused:
      break;
  }
  return State::Running;
}

void ServiceRun::review(State state, const QString& databasePath) {
  Q_ASSERT(m_state == State::NotStarted);
  m_followed = true;
  m_startedAt = QDateTime::currentDateTime();
  m_clock.start();
  if (state != State::Running) m_endMs = 0;
  m_options.ssh.database_path = databasePath.toStdString();
  setState(state);
  // What the store has of the run (never the worker's file), read on the run's thread, again
  // every kFollowMs while its row says it goes on; its end is the row's.
  const std::string path = databasePath.toStdString();
  const int64_t id = m_storeId;
  m_thread = QThread::create([this, path, id] {
    while (!pullStore(id) && !m_leave.load())
      for (int waited = 0; waited < kFollowMs && !m_leave.load(); waited += 50) QThread::msleep(50);
    if (m_leave.load()) return;
    try {  // the run's speed over the whole run, once it ended (runs/run_speed.h)
      const db::Database reader = openReader(path);
      const runs::RunSpeed speed = runs::run_speed(reader, db::get_run(reader, id));
      QMetaObject::invokeMethod(
          this,
          [this, speed] {
            m_storedSpeed = speed;
            emit changed();
          },
          Qt::QueuedConnection);
    } catch (const std::exception&) {
      // The steps' own mean stands in (runSpeed()).
    }
  });
  m_thread->start();
}

void ServiceRun::onStoredRow(const db::Run& run, bool ended) {
  const bool wasActive = isActive();
  m_storeRead = true;
  setStored(run);
  m_where = QString::fromStdString(runs::RunService::where_text(run));
  if (ended && wasActive) {
    m_endMs = m_clock.elapsed();
    if (run.exit_code) m_exitCode = static_cast<int>(*run.exit_code);
    setState(stateOf(run.status));
    appendLog(m_state == State::Failed ? QStringLiteral("error") : QStringLiteral("info"),
              tr("the run ended: %1").arg(stateText()));
  }
  emit changed();
}

void ServiceRun::deliver(qint64 upTo) {
  if (upTo <= m_delivered) return;
  const std::vector<MetricsRecord> records =
      m_feed->copy(static_cast<size_t>(m_delivered), static_cast<size_t>(upTo));
  m_delivered = upTo;
  for (const MetricsRecord& r : records) handle(r);
  emit changed();
}

runs::Abilities ServiceRun::unwatchedAbilities() const {
  runs::Abilities a;
  a.stop = a.kill = a.checkpoint = "not stored";
  if (m_storeId <= 0 || m_options.ssh.database_path.empty()) return a;
  try {
    const db::Database reader = openReader(m_options.ssh.database_path);
    return runs::RunService(m_options).abilities(db::get_run(reader, m_storeId));
  } catch (const std::exception& e) {
    a.stop = a.kill = a.checkpoint = e.what();
    return a;
  }
}

bool ServiceRun::canStop() const {
  return m_watched ? m_state == State::Running : unwatchedAbilities().stop.empty();
}
bool ServiceRun::canKill() const { return m_watched ? isActive() : unwatchedAbilities().kill.empty(); }
bool ServiceRun::canCheckpoint() const {
  return m_watched ? m_checkpointRefusal.isEmpty() : unwatchedAbilities().checkpoint.empty();
}
QString ServiceRun::checkpointUnsupportedReason() const {
  return m_watched ? m_checkpointRefusal : QString::fromStdString(unwatchedAbilities().checkpoint);
}

void ServiceRun::askUnwatched(const QString& what) {
  try {
    runs::RunService service(m_options);
    if (what == QLatin1String("checkpoint"))
      service.request_checkpoint(m_storeId);
    else
      service.request_end(m_storeId, what == QLatin1String("kill"), m_options.origin);
    appendLog(
        what == QLatin1String("kill") ? QStringLiteral("warning") : QStringLiteral("info"),
        what == QLatin1String("kill")
            ? tr("kill requested: progress since the last checkpoint is lost (the run is watched "
                 "elsewhere; its end is recorded there)")
        : what == QLatin1String("stop")
            ? tr("stop requested (SIGTERM): the worker saves a checkpoint at its next step boundary, then "
                 "exits")
            : tr("checkpoint requested (SIGUSR1): the worker saves one at its next step boundary and goes "
                 "on"));
  } catch (const std::exception& e) {
    appendLog(QStringLiteral("error"),
              tr("%1 of %2 refused: %3").arg(what, m_name, QString::fromUtf8(e.what())));
  }
  emit changed();
}

void ServiceRun::stop() {
  if (!m_watched) return askUnwatched(QStringLiteral("stop"));
  if (m_state != State::Running) return;
  appendLog(
      QStringLiteral("info"),
      tr("stop requested (SIGTERM): the worker saves a checkpoint at its next step boundary, then exits"));
  m_stopRequested = true;
  setState(State::Stopping);
  m_stopFlag.store(true);
}

void ServiceRun::checkpointNow() {
  if (!m_watched) return askUnwatched(QStringLiteral("checkpoint"));
  if (m_state != State::Running || !canCheckpoint()) return;
  appendLog(QStringLiteral("info"),
            tr("checkpoint requested (SIGUSR1): the worker saves one at its next step boundary and goes on"));
  m_checkpointFlag.store(true);
}

void ServiceRun::kill() {
  if (!m_watched) return askUnwatched(QStringLiteral("kill"));
  if (!isActive()) return;
  m_killRequested = true;
  appendLog(QStringLiteral("warning"), tr("kill requested: progress since the last checkpoint is lost"));
  m_killFlag.store(true);
}

void ServiceRun::detach() {
  if (!isActive() || m_followed) return;
  m_leave.store(true);
  if (m_thread) m_thread->wait();  // returns within one poll: the watcher flushes and leaves
  deliver(static_cast<qint64>(m_feed->size()));
  appendLog(QStringLiteral("info"),
            tr("left running on %1: it goes on in %2 after Flotilla closes").arg(m_where, m_runDir));
  m_endMs = m_clock.elapsed();
  setState(State::Detached);
}

}  // namespace flotilla::ui
