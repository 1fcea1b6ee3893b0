// Issue 18: "a desktop notification (and an optional webhook) when a run finishes, fails, stalls,
// or crosses its budget warning". Real LocalRuns over the fake worker script, a real HTTP listener on
// loopback for the webhook; the stop this window asks for is not notified.
#include <QJsonDocument>
#include <QJsonObject>
#include <QSignalSpy>
#include <QTcpServer>
#include <QTcpSocket>
#include <QTemporaryDir>
#include <QtTest>

#include "fake_worker.h"
#include "ui/main/runnotifier.h"
#include "ui/runs/servicerun.h"
#include "ui/runs/localruns.h"

using flotilla::ui::ServiceRun;
using flotilla::ui::LocalRuns;
using flotilla::ui::RunNotifier;

namespace {

// A one-route HTTP server: keeps each request body and answers `status`.
class Hook : public QObject {
 public:
  explicit Hook(int status) : m_status(status) {
    QVERIFY(m_server.listen(QHostAddress::LocalHost, 0));
    connect(&m_server, &QTcpServer::newConnection, this, [this] {
      while (QTcpSocket* s = m_server.nextPendingConnection()) {
        connect(s, &QTcpSocket::readyRead, this, [this, s] {
          m_buffers[s] += s->readAll();
          const QByteArray& b = m_buffers[s];
          const qsizetype end = b.indexOf("\r\n\r\n");
          if (end < 0) return;
          const QByteArray head = b.left(end).toLower();
          const qsizetype at = head.indexOf("content-length:");
          const int length = at < 0 ? 0 : head.mid(at + 15, head.indexOf('\r', at) - at - 15).trimmed().toInt();
          if (b.size() < end + 4 + length) return;
          requests << QString::fromLatin1(head.left(head.indexOf('\r')));
          bodies << b.mid(end + 4, length);
          s->write("HTTP/1.1 " + QByteArray::number(m_status) + " X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
          s->disconnectFromHost();
        });
      }
    });
  }
  QUrl url() const { return QUrl(QStringLiteral("http://127.0.0.1:%1/hook/SECRET").arg(m_server.serverPort())); }
  QStringList requests;
  QList<QByteArray> bodies;

 private:
  QTcpServer m_server;
  QHash<QTcpSocket*, QByteArray> m_buffers;
  int m_status;
};

}  // namespace

class TestNotifier : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void finishedAndFailedRunsNotifyAndPost();
  void aStallIsNotifiedAndTheUsersOwnStopIsNot();
  void theBudgetWarningIsNotifiedOnce();
  void aWebhookThatFailsIsReported();
  void theWebhookComesFromTheEnvironmentOnly();

 private:
  QTemporaryDir m_tmp;
  QString m_fake;
};

void TestNotifier::initTestCase() {
  QVERIFY(m_tmp.isValid());
  m_fake = fake_worker::write(m_tmp.path());
}

void TestNotifier::finishedAndFailedRunsNotifyAndPost() {
  Hook hook(200);
  LocalRuns runs(m_tmp.filePath(QStringLiteral("ws-finish")));
  runs.setWorkerPath(m_fake);
  runs.setDemoSteps(5);
  RunNotifier notifier(&runs);
  notifier.setDesktopEnabled(false);
  notifier.setWebhook(hook.url());
  QSignalSpy notified(&notifier, &RunNotifier::notified);
  QSignalSpy delivered(&notifier, &RunNotifier::webhookDelivered);

  ServiceRun* ok = runs.startDemo();
  QVERIFY(ok);
  QTRY_COMPARE_WITH_TIMEOUT(notified.count(), 1, 20000);
  QCOMPARE(notified.at(0).at(0).value<RunNotifier::Event>(), RunNotifier::Event::Finished);
  QCOMPARE(notified.at(0).at(1).toString(), QStringLiteral("Run %1 finished").arg(ok->name()));
  QVERIFY2(notified.at(0).at(2).toString().startsWith(QStringLiteral("step 5 of 5, loss ")),
           qPrintable(notified.at(0).at(2).toString()));
  QTRY_COMPARE_WITH_TIMEOUT(delivered.count(), 1, 10000);
  QCOMPARE(delivered.at(0).at(0).toBool(), true);
  QCOMPARE(hook.requests.value(0), QStringLiteral("post /hook/secret http/1.1"));
  const QJsonObject body = QJsonDocument::fromJson(hook.bodies.value(0)).object();
  QCOMPARE(body.value(QStringLiteral("event")).toString(), QStringLiteral("finished"));
  QCOMPARE(body.value(QStringLiteral("run")).toString(), ok->name());
  QCOMPARE(body.value(QStringLiteral("step")).toInteger(), 5);
  QVERIFY(body.value(QStringLiteral("text")).toString().startsWith(QStringLiteral("Run ")));

  qputenv("FAKE_EXIT", "4");
  ServiceRun* bad = runs.startDemo();
  qunsetenv("FAKE_EXIT");
  QVERIFY(bad);
  QTRY_COMPARE_WITH_TIMEOUT(notified.count(), 2, 20000);
  QCOMPARE(notified.at(1).at(0).value<RunNotifier::Event>(), RunNotifier::Event::Failed);
  QCOMPARE(notified.at(1).at(1).toString(), QStringLiteral("Run %1 failed").arg(bad->name()));
  QTRY_COMPARE_WITH_TIMEOUT(hook.bodies.size(), 2, 10000);
  QCOMPARE(QJsonDocument::fromJson(hook.bodies.value(1)).object().value(QStringLiteral("event")).toString(),
           QStringLiteral("failed"));
}

void TestNotifier::aStallIsNotifiedAndTheUsersOwnStopIsNot() {
  LocalRuns runs(m_tmp.filePath(QStringLiteral("ws-stall")));
  runs.setWorkerPath(m_fake);
  runs.setDemoSteps(1000);
  RunNotifier notifier(&runs);
  notifier.setDesktopEnabled(false);
  notifier.setStallSeconds(1);
  notifier.setCheckIntervalMs(100);
  QSignalSpy notified(&notifier, &RunNotifier::notified);
  qputenv("FAKE_STEP_S", "0.05");
  ServiceRun* run = runs.startDemo();
  QVERIFY(run);
  QTRY_VERIFY_WITH_TIMEOUT(run->lastStep() >= 5, 10000);
  QTest::qWait(1500);  // steps keep coming: no stall
  QCOMPARE(notified.count(), 0);
  run->stop();  // this window's Stop: the user knows
  qunsetenv("FAKE_STEP_S");
  QSignalSpy finished(run, &ServiceRun::finished);
  QVERIFY(finished.wait(20000));
  QTest::qWait(300);
  QCOMPARE(notified.count(), 0);

  // A worker that stops writing steps after its first: "stalled" once, after max(1 s, 20 steps).
  qputenv("FAKE_STEP_S", "30");
  ServiceRun* slow = runs.startDemo();
  qunsetenv("FAKE_STEP_S");
  QVERIFY(slow);
  QTRY_COMPARE_WITH_TIMEOUT(notified.count(), 1, 15000);
  QCOMPARE(notified.at(0).at(0).value<RunNotifier::Event>(), RunNotifier::Event::Stalled);
  QVERIFY2(notified.at(0).at(2).toString().startsWith(QStringLiteral("no new step for ")),
           qPrintable(notified.at(0).at(2).toString()));
  QTest::qWait(500);
  QCOMPARE(notified.count(), 1);  // once per stall
  slow->kill();
  QSignalSpy killed(slow, &ServiceRun::finished);
  QVERIFY(killed.wait(10000));
  QCOMPARE(notified.count(), 1);  // a kill is the user's own act
}

void TestNotifier::theBudgetWarningIsNotifiedOnce() {
  LocalRuns runs(m_tmp.filePath(QStringLiteral("ws-budget")));
  runs.setWorkerPath(m_fake);
  runs.setDemoSteps(1000);
  RunNotifier notifier(&runs);
  notifier.setDesktopEnabled(false);
  QSignalSpy notified(&notifier, &RunNotifier::notified);
  qputenv("FAKE_STEP_S", "0.05");
  ServiceRun* run = runs.startDemo();
  qunsetenv("FAKE_STEP_S");
  QVERIFY(run);
  // The runs layer's budget guard (WatchHooks::on_budget, as ServiceRun forwards it; the real guard in
  // ui_test_app_budget_e2e): the warning once, the cap left to the stop that follows.
  const QString warning = QStringLiteral("run '%1' has spent $0.0801 of its $0.1000 budget").arg(run->name());
  emit run->budgetCrossed(warning, false);
  emit run->budgetCrossed(warning, false);
  emit run->budgetCrossed(QStringLiteral("run 'x' reached its budget"), true);
  emit run->logAppended(QStringLiteral("warning"), QStringLiteral("disk is nearly full"));
  QCOMPARE(notified.count(), 1);
  QCOMPARE(notified.at(0).at(0).value<RunNotifier::Event>(), RunNotifier::Event::BudgetWarning);
  // The text does not name the run a second time (the title does): issue 34 #28.
  QCOMPARE(notified.at(0).at(1).toString(), QStringLiteral("Run %1 is near its budget").arg(run->name()));
  QCOMPARE(notified.at(0).at(2).toString(), QStringLiteral("spent $0.0801 of its $0.1000 budget"));
  run->kill();
  QSignalSpy finished(run, &ServiceRun::finished);
  QVERIFY(finished.wait(10000));
}

void TestNotifier::aWebhookThatFailsIsReported() {
  Hook hook(500);
  RunNotifier notifier(nullptr);
  notifier.setDesktopEnabled(false);
  notifier.setWebhook(hook.url());
  LocalRuns runs(m_tmp.filePath(QStringLiteral("ws-hook500")));
  runs.setWorkerPath(m_fake);
  runs.setDemoSteps(2);
  QSignalSpy delivered(&notifier, &RunNotifier::webhookDelivered);
  ServiceRun* run = runs.startDemo();
  QVERIFY(run);
  notifier.watch(run);
  QTRY_COMPARE_WITH_TIMEOUT(delivered.count(), 1, 20000);
  QCOMPARE(delivered.at(0).at(0).toBool(), false);
  QVERIFY2(delivered.at(0).at(1).toString().contains(QStringLiteral("answered 500")),
           qPrintable(delivered.at(0).at(1).toString()));
  QVERIFY(!delivered.at(0).at(1).toString().contains(QStringLiteral("SECRET")));  // the path is the secret
}

void TestNotifier::theWebhookComesFromTheEnvironmentOnly() {
  qunsetenv("FLOTILLA_WEBHOOK_URL");
  QVERIFY(RunNotifier(nullptr).webhook().isEmpty());
  QVERIFY(RunNotifier::webhookDescription().contains(QStringLiteral("FLOTILLA_WEBHOOK_URL")));
  qputenv("FLOTILLA_WEBHOOK_URL", "https://hooks.example.com/services/T0/B0/XYZ");
  QCOMPARE(RunNotifier(nullptr).webhook(), QUrl(QStringLiteral("https://hooks.example.com/services/T0/B0/XYZ")));
  QVERIFY(RunNotifier::webhookDescription().contains(QStringLiteral("hooks.example.com")));
  QVERIFY(!RunNotifier::webhookDescription().contains(QStringLiteral("XYZ")));
  qputenv("FLOTILLA_WEBHOOK_URL", "file:///etc/passwd");
  QVERIFY(RunNotifier(nullptr).webhook().isEmpty());
  QVERIFY(RunNotifier::webhookDescription().contains(QStringLiteral("not an http or https URL")));
  QVERIFY(RunNotifier::webhookHelp().contains(QStringLiteral("never saved")));
  qunsetenv("FLOTILLA_WEBHOOK_URL");
}

QTEST_MAIN(TestNotifier)
#include "test_notifier.moc"
