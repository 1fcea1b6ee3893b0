// The queue's scheduler inside the app (issue 37: "served by a scheduler that runs inside the
// app"): one per workspace, so this window serves the queue unless `flotilla queue serve` (or
// another window) already holds the lease, and then says who does and takes over once it stops.
//
// Decision: the scheduler runs on a thread of its own, never the GUI thread: acquiring the lease,
// each tick (placement, starting runs over SSH or Slurm) and the release at exit all happen there,
// and only words come back, as queued signals. Runs it starts are stored through the app's
// db::Writer (ServiceOptions::writer), so they appear on Live and Runs from the store feed like every
// other run. The scheduler itself is an engine behind a small interface (the runs layer's
// runs::Scheduler in the app; tests may pass another), and what it decided is told from the
// store's entries (queued -> started, started -> back in the queue, -> failed), compared before and
// after each tick on the thread's own read connection, so the notifications never depend on the
// engine's wording.
#pragma once

#include <QDateTime>
#include <QObject>
#include <QString>
#include <QThread>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runs/service.h"
#include "ui/main/runnotifier.h"

namespace flotilla::ui {

// What the scheduler thread drives. acquire() throws (any std::exception) when another holds the
// lease; tick() returns false once the lease is lost. Destroying it releases the lease.
class SchedulerEngine {
 public:
  virtual ~SchedulerEngine() = default;
  virtual void acquire() = 0;
  virtual bool tick(std::vector<std::string>* lines) = 0;
  // What idle autostop did during the last tick (node, level, text), for the notifier.
  struct Notice {
    std::string node, level, text;
  };
  virtual std::vector<Notice> takeNotices() { return {}; }
};
using SchedulerEngineFactory = std::function<std::unique_ptr<SchedulerEngine>()>;
// The runs layer's scheduler (runs::Scheduler, origin "flotilla app") over `service`: the app's
// writer, runs root and worker (LocalRuns::serviceOptions()); its local workers outlive the window.
// Its policies are `flotilla queue serve`'s (runs/scheduler_policies.h: successive halving, idle
// autostop and the wake of a stopped node), autostop's command logs in <workspace>/autostop.
SchedulerEngineFactory runsSchedulerEngine(runs::ServiceOptions service);

class SchedulerWorker;

class AppScheduler : public QObject {
  Q_OBJECT

 public:
  enum class State { Stopped, Serving, Elsewhere };
  Q_ENUM(State)

  // `databasePath`: the workspace store (read for the lease holder and the entries' states).
  AppScheduler(const QString& databasePath, SchedulerEngineFactory engine, QObject* parent = nullptr);
  ~AppScheduler() override;  // stops serving: the lease is released, runs keep running

  // How often it ticks while serving (default 2 s) and retries the lease while refused (10 s).
  void setIntervals(int tickMs, int retryMs);

  // Serve the queue from this window (the Queue page's toggle), or stop and release the lease.
  void setEnabled(bool on);
  bool isEnabled() const { return m_enabled; }
  State state() const { return m_state; }
  // "this window (since 14:02)", "served by flotilla queue serve (pid 123 on host-a)", "stopped: ...".
  QString statusText() const { return m_status; }

  // The lease holder in words, as the Queue page and the status line say it.
  static QString holderText(const QString& origin, qint64 pid, const QString& host);

 signals:
  void statusChanged(flotilla::ui::AppScheduler::State state, const QString& text);
  // A decision about an entry: started (QueueStarted), requeued, failed.
  void decided(flotilla::ui::RunNotifier::Event event, const QString& entry, const QString& text);
  // Idle autostop stopped, failed to stop or woke a node (RunNotifier::notifyAutostop).
  void autostopped(const QString& node, const QString& level, const QString& text);
  // Each tick's words (the scheduler's lines).
  void noted(const QString& line);

 private:
  friend class SchedulerWorker;
  void onStatus(int state, const QString& text);

  QString m_path;
  SchedulerEngineFactory m_factory;
  int m_tickMs = 2000, m_retryMs = 10000;
  bool m_enabled = false;
  State m_state = State::Stopped;
  QString m_status;
  QThread m_thread;
  SchedulerWorker* m_worker = nullptr;
};

}  // namespace flotilla::ui
