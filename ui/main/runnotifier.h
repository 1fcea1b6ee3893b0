// Tells the user when a run needs attention while they look elsewhere: a desktop notification (and,
// when FLOTILLA_WEBHOOK_URL is set, a JSON POST to that URL) when a run finishes, fails, is stopped
// by its budget or a preemption, stalls (no new step for a long while), or crosses its budget warning.
//
// Decision: the webhook URL comes from the environment, never from a settings file: a Slack or
// Teams webhook URL is a secret (its path is the credential), and nothing secret is stored. The
// Settings page says whether it is set and to which host. The desktop notification is the tray's
// balloon where the desktop has a tray; everywhere, notified() carries the same words (the main
// window shows them in its status bar), so an environment without a tray still tells the user.
// A stop this window asked for (Stop on Live, a run in Stopping) and a kill are the user's own acts:
// no notification. Idle autostop's stops, failures and starts of a node are notified too (Autostop,
// with no run). A stall is "no step for max(stallSeconds, 20 x the run's mean step time up to its last step)".
#pragma once

#include <QDateTime>
#include <QHash>
#include <QObject>
#include <QPointer>
#include <QString>
#include <QUrl>

#include "ui/runs/runhandle.h"

class QNetworkAccessManager;
class QSystemTrayIcon;
class QTimer;

namespace flotilla::ui {

class LocalRuns;

class RunNotifier : public QObject {
  Q_OBJECT

 public:
  // Queue*: the in-app scheduler's decisions (ui/queue/appscheduler.h): a queued entry started, put
  // back in the queue after its place lost it, or failed for good. Autostop: idle autostop stopped
  // (or failed to stop, or woke) a rented node.
  enum class Event {
    Finished,
    Failed,
    Stopped,
    Stalled,
    BudgetWarning,
    QueueStarted,
    QueueRequeued,
    QueueFailed,
    Autostop
  };
  Q_ENUM(Event)

  // Watches every run `runs` starts or re-attaches (local and on nodes).
  explicit RunNotifier(LocalRuns* runs, QObject* parent = nullptr);
  ~RunNotifier() override;

  // Starts watching one run (done for `runs`' runs already; public for tests and other sources).
  void watch(RunHandle* run);
  // A scheduler decision about queue entry `entry` (a Queue* event), told as every notification is.
  void notifyQueue(Event event, const QString& entry, const QString& text);

  // The webhook (empty: none). Defaults to FLOTILLA_WEBHOOK_URL; must be http or https.
  void setWebhook(const QUrl& url);
  QUrl webhook() const { return m_webhook; }
  // "JSON to hooks.slack.com" (never the URL's path) or why there is none, for Settings.
  static QString webhookDescription();
  static QString webhookHelp();  // what is posted and how to set it (the Settings row's tooltip)
  void setDesktopEnabled(bool on) { m_desktop = on; }
  // The shortest stall that is reported (default 300 s) and how often runs are checked (15 s).
  void setStallSeconds(double seconds) { m_stallSeconds = seconds; }
  void setCheckIntervalMs(int ms);

  // What idle autostop did to node `node` (runs::AutostopNotice: level info, warning or error, and
  // its text, "node vm-1 stopped by autostop at 03:12 after 30 min idle (...)"): notified like a
  // run's event, titled by the node. The scheduler's owner calls it with each tick's notices.
  void notifyAutostop(const QString& node, const QString& level, const QString& text);

  // "finished", "failed", ... as the webhook's "event" field says it.
  static QString eventName(Event event);

 signals:
  // Every notification, as shown: a title ("Run demo-… finished") and a line of detail.
  void notified(flotilla::ui::RunNotifier::Event event, const QString& title, const QString& text);
  // The webhook answered (ok: a 2xx status) or could not be reached (error in words).
  void webhookDelivered(bool ok, const QString& error);

 private:
  struct Watched {
    QPointer<RunHandle> run;
    RunHandle::State state = RunHandle::State::NotStarted;
    bool stopAsked = false;  // was Stopping: the user's stop
    qint64 lastStep = -1;
    QDateTime stepSeen;
    qint64 elapsedAtStep = 0;  // the run's elapsed ms when lastStep arrived: its pace before a stall
    bool stallReported = false;
    bool budgetReported = false;
  };
  void onState(RunHandle* run, RunHandle::State state);
  void onBudget(RunHandle* run, const QString& message, bool stopping);
  void checkStalls();
  void notify(Event event, RunHandle* run, const QString& title, const QString& text);
  void post(Event event, RunHandle* run, const QString& title, const QString& text);

  QHash<RunHandle*, Watched> m_watched;
  QNetworkAccessManager* m_net;
  QSystemTrayIcon* m_tray = nullptr;
  QTimer* m_check;
  QUrl m_webhook;
  QString m_queueEntry;  // the entry of the scheduler notification being posted
  bool m_desktop = true;
  double m_stallSeconds = 300;
};

}  // namespace flotilla::ui
