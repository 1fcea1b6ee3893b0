// In-app scheduler (see appscheduler.h).
#include "ui/queue/appscheduler.h"

#include <QDateTime>
#include <QTimer>

#include <map>
#include <utility>

#include <filesystem>
#include "db/errors.h"
#include "db/queue.h"
#include "engine/core/probe.h"

#include "runs/scheduler.h"
#include "runs/scheduler_policies.h"

namespace flotilla::ui {

namespace {

class RunsEngine : public SchedulerEngine {
 public:
  explicit RunsEngine(runs::SchedulerOptions options)
      : m_scheduler(withPolicies(std::move(options), m_notices)) {}
  void acquire() override { m_scheduler.acquire(); }
  bool tick(std::vector<std::string>* lines) override {
    runs::TickReport report = m_scheduler.tick();
    *lines = std::move(report.lines);
    return !report.lease_lost;
  }
  std::vector<Notice> takeNotices() override { return std::exchange(*m_notices, {}); }

 private:
  // The standard policies, their autostop notices gathered for takeNotices() (the tick's thread).
  static runs::SchedulerOptions withPolicies(runs::SchedulerOptions o,
                                             const std::shared_ptr<std::vector<Notice>>& notices) {
    const std::string logs =
        (std::filesystem::path(o.service.ssh.database_path).parent_path() / "autostop").string();
    runs::add_standard_policies(o, logs, [notices](const runs::AutostopNotice& n) {
      notices->push_back({n.node, n.level, n.text});
    });
    return o;
  }
  std::shared_ptr<std::vector<Notice>> m_notices = std::make_shared<std::vector<Notice>>();
  runs::Scheduler m_scheduler;
};

}  // namespace

SchedulerEngineFactory runsSchedulerEngine(runs::ServiceOptions service) {
  return [service]() -> std::unique_ptr<SchedulerEngine> {
    runs::SchedulerOptions o;
    o.service = service;
    o.service.origin = "flotilla app";
    o.service.stop_with_parent = false;  // a run outlives the window, as `flotilla queue serve`'s do
    o.origin = "flotilla app";
    o.local = runs::local_facts(probe_machine());  // on the scheduler's thread, once per lease
    return std::make_unique<RunsEngine>(std::move(o));
  };
}

// Lives on AppScheduler's thread: every store access and every engine call happen here.
class SchedulerWorker : public QObject {
 public:
  SchedulerWorker(AppScheduler* owner, QString path, SchedulerEngineFactory factory, int tickMs, int retryMs)
      : m_owner(owner),
        m_path(std::move(path)),
        m_factory(std::move(factory)),
        m_tickMs(tickMs),
        m_retryMs(retryMs) {}

  void start() {
    m_timer = new QTimer(this);
    m_timer->setSingleShot(true);
    connect(m_timer, &QTimer::timeout, this, [this] { turn(); });
    turn();
  }

  void stop(const QString& why) {
    if (m_timer) m_timer->stop();
    m_engine.reset();  // releases the lease; the runs it started keep running
    m_held = false;
    report(AppScheduler::State::Stopped, QObject::tr("stopped: %1").arg(why));
  }

 private:
  void report(AppScheduler::State state, const QString& text) {
    AppScheduler* owner = m_owner;
    QMetaObject::invokeMethod(
        owner, [owner, state, text] { owner->onStatus(static_cast<int>(state), text); },
        Qt::QueuedConnection);
  }
  void tell(RunNotifier::Event event, const std::string& entry, const std::string& why) {
    AppScheduler* owner = m_owner;
    const QString e = QString::fromStdString(entry), w = QString::fromStdString(why);
    QMetaObject::invokeMethod(
        owner, [owner, event, e, w] { emit owner->decided(event, e, w); }, Qt::QueuedConnection);
  }
  void autostopped(const SchedulerEngine::Notice& n) {
    AppScheduler* owner = m_owner;
    const QString node = QString::fromStdString(n.node), level = QString::fromStdString(n.level),
                  text = QString::fromStdString(n.text);
    QMetaObject::invokeMethod(
        owner, [owner, node, level, text] { emit owner->autostopped(node, level, text); },
        Qt::QueuedConnection);
  }
  void note(const std::string& line) {
    AppScheduler* owner = m_owner;
    const QString l = QString::fromStdString(line);
    QMetaObject::invokeMethod(
        owner, [owner, l] { emit owner->noted(l); }, Qt::QueuedConnection);
  }

  db::Database& store() {
    if (!m_db) {
      db::OpenOptions o;
      o.create = false;
      o.quick_check = false;
      m_db = std::make_unique<db::Database>(m_path.toStdString(), o);
    }
    return *m_db;
  }

  // Entries' states now; tells what changed since the last turn.
  void compareStates(bool tellChanges) {
    std::map<int64_t, db::EntryState> now;
    for (const db::QueueEntry& e : db::list_queue(store(), true)) {
      now[e.id] = e.state;
      if (!tellChanges) continue;
      const auto before = m_states.find(e.id);
      const bool wasWaiting = before == m_states.end() || before->second == db::EntryState::kQueued ||
                              before->second == db::EntryState::kPaused;
      const bool wasActive = before != m_states.end() && (before->second == db::EntryState::kStarting ||
                                                          before->second == db::EntryState::kRunning);
      const bool active = e.state == db::EntryState::kStarting || e.state == db::EntryState::kRunning;
      if (wasWaiting && active)
        tell(RunNotifier::Event::QueueStarted, e.name, e.why);
      else if (wasActive && e.state == db::EntryState::kQueued)
        tell(RunNotifier::Event::QueueRequeued, e.name, e.why);
      else if (e.state == db::EntryState::kFailed && (before == m_states.end() || before->second != e.state))
        tell(RunNotifier::Event::QueueFailed, e.name, e.why);
    }
    m_states = std::move(now);
  }

  QString holder() {
    const std::optional<db::SchedulerLease> lease = db::scheduler_lease(store());
    if (!lease) return {};
    return AppScheduler::holderText(QString::fromStdString(lease->origin), lease->pid,
                                    QString::fromStdString(lease->host));
  }

  void turn() {
    int next = m_tickMs;
    try {
      if (!m_held) {
        if (!m_factory) {
          report(AppScheduler::State::Stopped, QObject::tr("stopped: this build has no scheduler"));
          return;
        }
        if (!m_engine) m_engine = m_factory();
        try {
          m_engine->acquire();
          m_held = true;
          compareStates(false);
          report(AppScheduler::State::Serving,
                 QObject::tr("this window (since %1)")
                     .arg(QDateTime::currentDateTime().toString(QStringLiteral("HH:mm"))));
        } catch (const std::exception& refused) {
          m_engine.reset();
          const QString who = holder();
          report(AppScheduler::State::Elsewhere,
                 who.isEmpty() ? QObject::tr("stopped: %1").arg(QString::fromUtf8(refused.what()))
                               : QObject::tr("served by %1").arg(who));
          next = m_retryMs;
        }
      }
      if (m_held) {
        std::vector<std::string> lines;
        const bool kept = m_engine->tick(&lines);
        for (const std::string& l : lines) note(l);
        for (const SchedulerEngine::Notice& n : m_engine->takeNotices()) autostopped(n);
        compareStates(true);
        if (!kept) {
          m_engine.reset();
          m_held = false;
          const QString who = holder();
          report(AppScheduler::State::Elsewhere, who.isEmpty()
                                                     ? QObject::tr("stopped: the lease was taken over")
                                                     : QObject::tr("served by %1").arg(who));
          next = m_retryMs;
        }
      }
    } catch (const std::exception& e) {
      // A store or engine failure: say it, drop the lease, try again later.
      m_engine.reset();
      m_held = false;
      report(AppScheduler::State::Stopped, QObject::tr("stopped: %1").arg(QString::fromUtf8(e.what())));
      next = m_retryMs;
    }
    m_timer->start(next);
  }

  AppScheduler* m_owner;
  QString m_path;
  SchedulerEngineFactory m_factory;
  int m_tickMs, m_retryMs;
  QTimer* m_timer = nullptr;
  std::unique_ptr<SchedulerEngine> m_engine;
  bool m_held = false;
  std::unique_ptr<db::Database> m_db;
  std::map<int64_t, db::EntryState> m_states;
};

AppScheduler::AppScheduler(const QString& databasePath, SchedulerEngineFactory engine, QObject* parent)
    : QObject(parent), m_path(databasePath), m_factory(std::move(engine)) {
  m_thread.setObjectName(QStringLiteral("scheduler"));
  m_status = tr("stopped: serving the queue is off in this window");
}

AppScheduler::~AppScheduler() { setEnabled(false); }

void AppScheduler::setIntervals(int tickMs, int retryMs) {
  m_tickMs = tickMs;
  m_retryMs = retryMs;
}

QString AppScheduler::holderText(const QString& origin, qint64 pid, const QString& host) {
  return tr("%1 (pid %2 on %3)").arg(origin.isEmpty() ? tr("another scheduler") : origin).arg(pid).arg(host);
}

void AppScheduler::setEnabled(bool on) {
  if (on == m_enabled) return;
  m_enabled = on;
  if (on) {
    m_worker = new SchedulerWorker(this, m_path, m_factory, m_tickMs, m_retryMs);
    m_worker->moveToThread(&m_thread);
    connect(&m_thread, &QThread::finished, m_worker, &QObject::deleteLater);
    m_thread.start();
    SchedulerWorker* worker = m_worker;
    QMetaObject::invokeMethod(
        worker, [worker] { worker->start(); }, Qt::QueuedConnection);
    return;
  }
  if (m_worker) {
    // Released before the window goes: the next scheduler (flotilla queue serve, another window)
    // takes the lease at once instead of waiting for it to go stale.
    SchedulerWorker* worker = m_worker;
    QMetaObject::invokeMethod(
        worker, [worker] { worker->stop(QObject::tr("serving the queue is off in this window")); },
        Qt::BlockingQueuedConnection);
    m_worker = nullptr;
  }
  m_thread.quit();
  m_thread.wait();
  onStatus(static_cast<int>(State::Stopped), tr("stopped: serving the queue is off in this window"));
}

void AppScheduler::onStatus(int state, const QString& text) {
  // A report queued before a stop must not undo it.
  if (!m_enabled && static_cast<State>(state) != State::Stopped) return;
  m_state = static_cast<State>(state);
  if (m_status == text) return;
  m_status = text;
  emit statusChanged(m_state, text);
}

}  // namespace flotilla::ui
