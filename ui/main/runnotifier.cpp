// Run notifications (see runnotifier.h).
#include "ui/main/runnotifier.h"

#include <QApplication>
#include <QJsonDocument>
#include <QJsonObject>
#include <QNetworkAccessManager>
#include <QNetworkReply>
#include <QNetworkRequest>
#include <QSystemTrayIcon>
#include <QTimer>

#include <algorithm>
#include <cmath>

#include "ui/common/numberformat.h"
#include "ui/runs/servicerun.h"
#include "ui/runs/localruns.h"
#include "ui/runs/localrunsmodel.h"

namespace flotilla::ui {
namespace {

QUrl webhookFromEnvironment() {
  const QUrl url(qEnvironmentVariable("FLOTILLA_WEBHOOK_URL").trimmed());
  if (!url.isValid() || (url.scheme() != QLatin1String("http") && url.scheme() != QLatin1String("https")))
    return {};
  return url;
}

}  // namespace

RunNotifier::RunNotifier(LocalRuns* runs, QObject* parent)
    : QObject(parent), m_net(new QNetworkAccessManager(this)), m_check(new QTimer(this)),
      m_webhook(webhookFromEnvironment()) {
  m_check->setInterval(15000);
  connect(m_check, &QTimer::timeout, this, &RunNotifier::checkStalls);
  m_check->start();
  if (!runs) return;
  for (int i = 0; i < runs->count(); ++i) watch(runs->at(i));
  connect(runs, &LocalRuns::runAdded, this, [this, runs](int index) { watch(runs->at(index)); });
}

RunNotifier::~RunNotifier() = default;

void RunNotifier::setWebhook(const QUrl& url) { m_webhook = url; }

void RunNotifier::setCheckIntervalMs(int ms) { m_check->setInterval(ms); }

QString RunNotifier::webhookDescription() {
  const QString raw = qEnvironmentVariable("FLOTILLA_WEBHOOK_URL").trimmed();
  if (raw.isEmpty()) return tr("None (set FLOTILLA_WEBHOOK_URL)");
  const QUrl url = webhookFromEnvironment();
  if (url.isEmpty()) return tr("None: FLOTILLA_WEBHOOK_URL is not an http or https URL");
  return tr("JSON to %1").arg(url.host());
}

QString RunNotifier::webhookHelp() {
  return tr("Finished, failed, stopped, stalled and near-budget runs are posted as JSON (event, run, "
            "state, step, loss, text) to the URL in FLOTILLA_WEBHOOK_URL, e.g. a Slack or Teams "
            "incoming webhook. It is read from the environment and never saved: such URLs are secrets.");
}

QString RunNotifier::eventName(Event event) {
  switch (event) {
    case Event::Finished:
      return QStringLiteral("finished");
    case Event::Failed:
      return QStringLiteral("failed");
    case Event::Stopped:
      return QStringLiteral("stopped");
    case Event::Stalled:
      return QStringLiteral("stalled");
    case Event::BudgetWarning:
      return QStringLiteral("budget_warning");
    case Event::Autostop:
      return QStringLiteral("autostop");
    case Event::QueueStarted:
      return QStringLiteral("queue_started");
    case Event::QueueRequeued:
      return QStringLiteral("queue_requeued");
    case Event::QueueFailed:
      return QStringLiteral("queue_failed");
  }
  return {};
}

void RunNotifier::notifyAutostop(const QString& node, const QString& level, const QString& text) {
  const QString title = level == QLatin1String("error") ? tr("Autostop of node %1 failed").arg(node)
                        : text.contains(QLatin1String("stopped by autostop")) ? tr("Node %1 stopped").arg(node)
                                                                              : tr("Node %1").arg(node);
  notify(Event::Autostop, nullptr, title, text);
}

void RunNotifier::watch(RunHandle* run) {
  if (!run || m_watched.contains(run)) return;
  Watched w;
  w.run = run;
  w.state = run->state();
  w.stopAsked = run->state() == RunHandle::State::Stopping;
  w.lastStep = run->lastStep();
  w.stepSeen = QDateTime::currentDateTimeUtc();
  w.elapsedAtStep = run->elapsedMs();
  m_watched.insert(run, w);
  connect(run, &RunHandle::stateChanged, this, [this, run](RunHandle::State s) { onState(run, s); });
  connect(run, &RunHandle::budgetCrossed, this,
          [this, run](const QString& message, bool stopping) { onBudget(run, message, stopping); });
  connect(run, &QObject::destroyed, this, [this, run] { m_watched.remove(run); });
}

void RunNotifier::onState(RunHandle* run, RunHandle::State state) {
  auto it = m_watched.find(run);
  if (it == m_watched.end()) return;
  const RunHandle::State was = it->state;
  it->state = state;
  if (state == RunHandle::State::Stopping) it->stopAsked = true;
  if (state == was) return;
  const QString name = run->name();
  const QString progress = tr("step %1 of %2").arg(run->lastStep()).arg(run->plannedSteps());
  const double loss = run->lastLoss();
  const QString lossText = loss > 0 && std::isfinite(loss) ? tr(", loss %1").arg(formatMetric(loss)) : QString();
  switch (state) {
    case RunHandle::State::Completed:
      notify(Event::Finished, run, tr("Run %1 finished").arg(name), progress + lossText);
      break;
    case RunHandle::State::Failed: {
      const QString why = run->failureReason().isEmpty() ? run->stateText() : run->failureReason();
      notify(Event::Failed, run, tr("Run %1 failed").arg(name), tr("%1 at %2").arg(why, progress));
      break;
    }
    case RunHandle::State::Stopped:
      // Stopped without this window's Stop: its budget, its time limit or a preemption did it.
      if (!it->stopAsked) {
        // The title says "stopped"; the text gives only why ("budget reached: $0.1512 of $0.15"), not
        // the state word again ("Run x stopped: stopped (budget reached ...)").
        QString why = run->stateText();
        const QString word = QStringLiteral("stopped (");
        if (why.startsWith(word) && why.endsWith(QLatin1Char(')'))) why = why.mid(word.size()).chopped(1);
        notify(Event::Stopped, run, tr("Run %1 stopped").arg(name),
               why == QLatin1String("stopped") ? progress : tr("%1 at %2").arg(why, progress));
      }
      break;
    default:
      break;
  }
}

void RunNotifier::onBudget(RunHandle* run, const QString& message, bool stopping) {
  auto it = m_watched.find(run);
  // The cap itself is told by the stop that follows ("stopped (budget reached: ...)").
  if (it == m_watched.end() || it->budgetReported || stopping) return;
  it->budgetReported = true;
  // The runs layer's message names the run ("run 'x' has spent $0.12 of its $0.15 budget"); the
  // title already does, so the text keeps what was spent: "spent $0.12 of its $0.15 budget".
  QString text = message;
  const QString prefix = QStringLiteral("run '%1' has ").arg(run->name());
  if (text.startsWith(prefix)) text = text.mid(prefix.size());
  notify(Event::BudgetWarning, run, tr("Run %1 is near its budget").arg(run->name()), text);
}

void RunNotifier::checkStalls() {
  const QDateTime now = QDateTime::currentDateTimeUtc();
  for (auto it = m_watched.begin(); it != m_watched.end(); ++it) {
    RunHandle* run = it->run;
    if (!run || run->state() != RunHandle::State::Running) continue;
    const qint64 step = run->lastStep();
    if (step != it->lastStep) {
      it->lastStep = step;
      it->stepSeen = now;
      it->elapsedAtStep = run->elapsedMs();
      it->stallReported = false;
      continue;
    }
    // The run's own pace: 20 of its mean steps, and never less than stallSeconds.
    const double mean =
        step > 0 ? static_cast<double>(it->elapsedAtStep) / 1000.0 / static_cast<double>(step) : 0;
    const double limit = std::max(m_stallSeconds, 20.0 * mean);
    const double quiet = static_cast<double>(it->stepSeen.msecsTo(now)) / 1000.0;
    if (it->stallReported || quiet < limit) continue;
    it->stallReported = true;
    notify(Event::Stalled, run, tr("Run %1 has stalled").arg(run->name()),
           tr("no new step for %1 (at step %2; it takes about %3 s per step)")
               .arg(formatDuration(static_cast<qint64>(quiet * 1000)))
               .arg(step)
               .arg(mean, 0, 'g', 3));
  }
}

void RunNotifier::notify(Event event, RunHandle* run, const QString& title, const QString& text) {
  emit notified(event, title, text);
  if (m_desktop && QSystemTrayIcon::isSystemTrayAvailable() && QSystemTrayIcon::supportsMessages()) {
    if (!m_tray) {
      m_tray = new QSystemTrayIcon(QApplication::windowIcon(), this);
      m_tray->setToolTip(QStringLiteral("Flotilla"));
      m_tray->show();
    }
    m_tray->showMessage(title, text,
                        event == Event::Failed || event == Event::Stalled || event == Event::QueueFailed ||
                            title.startsWith(tr("Autostop of"))
                            ? QSystemTrayIcon::Warning
                            : QSystemTrayIcon::Information,
                        15000);
  }
  if (!m_webhook.isEmpty()) post(event, run, title, text);
}

void RunNotifier::notifyQueue(Event event, const QString& entry, const QString& text) {
  const QString title = event == Event::QueueStarted    ? tr("Queue: %1 started").arg(entry)
                        : event == Event::QueueRequeued ? tr("Queue: %1 back in the queue").arg(entry)
                                                        : tr("Queue: %1 failed").arg(entry);
  m_queueEntry = entry;
  notify(event, nullptr, title, text);
}

void RunNotifier::post(Event event, RunHandle* run, const QString& title, const QString& text) {
  if (!run) {  // a scheduler decision: the entry's name, no run figures
    QJsonObject body{{QStringLiteral("event"), eventName(event)},
                     {QStringLiteral("run"), m_queueEntry},
                     {QStringLiteral("title"), title},
                     {QStringLiteral("text"), title + QStringLiteral(": ") + text},
                     {QStringLiteral("detail"), text}};
    QNetworkRequest request(m_webhook);
    request.setHeader(QNetworkRequest::ContentTypeHeader, QStringLiteral("application/json"));
    request.setTransferTimeout(10000);
    QNetworkReply* reply = m_net->post(request, QJsonDocument(body).toJson(QJsonDocument::Compact));
    connect(reply, &QNetworkReply::finished, reply, &QObject::deleteLater);
    return;
  }
  QJsonObject body{{QStringLiteral("event"), eventName(event)},
                   {QStringLiteral("title"), title},
                   {QStringLiteral("text"), title + QStringLiteral(": ") + text},  // Slack shows "text"
                   {QStringLiteral("detail"), text}};
  if (run) {  // a node's event (autostop) has no run fields
    body.insert(QStringLiteral("run"), run->name());
    body.insert(QStringLiteral("state"), run->stateText());
    body.insert(QStringLiteral("step"), run->lastStep());
    body.insert(QStringLiteral("planned_steps"), run->plannedSteps());
    if (run->storeId() > 0) body.insert(QStringLiteral("run_id"), run->storeId());
    const double loss = run->lastLoss();
    if (loss > 0 && std::isfinite(loss)) body.insert(QStringLiteral("loss"), loss);
  }
  QNetworkRequest request(m_webhook);
  request.setHeader(QNetworkRequest::ContentTypeHeader, QStringLiteral("application/json"));
  request.setTransferTimeout(10000);
  QNetworkReply* reply = m_net->post(request, QJsonDocument(body).toJson(QJsonDocument::Compact));
  connect(reply, &QNetworkReply::finished, this, [this, reply] {
    reply->deleteLater();
    const int status = reply->attribute(QNetworkRequest::HttpStatusCodeAttribute).toInt();
    if (reply->error() == QNetworkReply::NoError && status >= 200 && status < 300) {
      emit webhookDelivered(true, QString());
    } else {
      emit webhookDelivered(false, tr("the webhook at %1 answered %2")
                                       .arg(m_webhook.host(), status ? QString::number(status) : reply->errorString()));
    }
  });
}

}  // namespace flotilla::ui
