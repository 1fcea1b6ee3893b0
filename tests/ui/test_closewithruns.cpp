// Closing the main window while a run trains (fake worker): the question is asked with the
// number of active runs; Cancel keeps everything; "Stop the run" keeps the window open (never
// blocking the UI thread) until the worker has checkpointed and exited, then closes; "Leave it
// running" closes at once and the worker keeps training. Also: starting the demo from the Runs
// page opens the Live page, and the status bar counts running runs.
#include <QLabel>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include <signal.h>

#include <optional>

#include "db/database.h"
#include "db/workspace.h"
#include "fake_worker.h"
#include "ui/live/livepage.h"
#include "ui/main/mainwindow.h"
#include "ui/runs/localruns.h"
#include "ui/runs/runspage.h"
#include "ui/runs/servicerun.h"

using flotilla::ui::MainWindow;
using flotilla::ui::ServiceRun;
using Choice = flotilla::ui::MainWindow::CloseChoice;

class TestCloseWithRuns : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void init() { qputenv("FAKE_STEP_S", "0.05"); }
  void cleanup() { qunsetenv("FAKE_STEP_S"); }
  void runTheDemoOpensTheLivePageAndCountsIt();
  void cancelKeepsTheWindowAndTheRun();
  void stopClosesOnceTheWorkerHasCheckpointed();
  void leaveRunningClosesAndTheWorkerGoesOn();
  void noQuestionWithoutActiveRuns();

 private:
  std::unique_ptr<MainWindow> makeWindow() {
    auto w = std::make_unique<MainWindow>(m_workspace);
    w->localRuns()->setWorkerPath(m_fake);
    w->localRuns()->setDemoSteps(100000);
    w->resize(1280, 800);
    w->show();
    if (!QTest::qWaitForWindowExposed(w.get())) qWarning("window not exposed");
    return w;
  }
  ServiceRun* startDemo(MainWindow* w) {
    auto* runs = qobject_cast<flotilla::ui::RunsPage*>(w->page(MainWindow::Runs));
    w->showPage(MainWindow::Runs);
    QTest::mouseClick(runs->runDemoButton(), Qt::LeftButton);
    return w->localRuns()->at(w->localRuns()->count() - 1);
  }
  static QString runningText(MainWindow* w) {
    return w->findChild<QLabel*>(QStringLiteral("statusRunning"))->text();
  }

  QTemporaryDir m_tmp;
  QString m_fake;
  flotilla::ui::WorkspaceInfo m_workspace;
  std::optional<flotilla::db::Database> m_db;
};

void TestCloseWithRuns::initTestCase() {
  QVERIFY(m_tmp.isValid());
  QStandardPaths::setTestModeEnabled(true);
  QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, m_tmp.filePath(QStringLiteral("config")));
  m_fake = fake_worker::write(m_tmp.path());
  const std::string dir = m_tmp.filePath(QStringLiteral("workspace")).toStdString();
  flotilla::db::ensure_workspace_dir(dir);
  m_db.emplace(flotilla::db::workspace_database_path(dir));
  m_workspace.directory = QString::fromStdString(dir);
  m_workspace.databasePath = QString::fromStdString(m_db->path());
}

void TestCloseWithRuns::runTheDemoOpensTheLivePageAndCountsIt() {
  auto w = makeWindow();
  QCOMPARE(runningText(w.get()), QStringLiteral("0 runs running"));
  ServiceRun* run = startDemo(w.get());
  QVERIFY(run);
  QCOMPARE(w->currentPage(), int(MainWindow::Live));
  auto* live = qobject_cast<flotilla::ui::LivePage*>(w->page(MainWindow::Live));
  QCOMPARE(live->run(), run);
  QCOMPARE(runningText(w.get()), QStringLiteral("1 run running"));
  QVERIFY(run->runDir().startsWith(m_workspace.directory + QStringLiteral("/runs/demo")));
  ServiceRun* second = startDemo(w.get());
  QVERIFY(second && second != run);
  QCOMPARE(runningText(w.get()), QStringLiteral("2 runs running"));
  QCOMPARE(live->run(), second);
  QSignalSpy done(run, &ServiceRun::finished);
  QSignalSpy done2(second, &ServiceRun::finished);
  w->localRuns()->stopAll();
  QVERIFY(done.count() || done.wait(10000));
  QVERIFY(done2.count() || done2.wait(10000));
  QCOMPARE(runningText(w.get()), QStringLiteral("0 runs running"));
}

void TestCloseWithRuns::cancelKeepsTheWindowAndTheRun() {
  auto w = makeWindow();
  int asked = -1;
  w->setCloseQuestion([&](int active) {
    asked = active;
    return Choice::Cancel;
  });
  ServiceRun* run = startDemo(w.get());
  QVERIFY(!w->close());
  QCOMPARE(asked, 1);
  QVERIFY(w->isVisible());
  QCOMPARE(run->state(), ServiceRun::State::Running);
  run->kill();
  QTRY_VERIFY_WITH_TIMEOUT(!run->isActive(), 10000);
}

void TestCloseWithRuns::stopClosesOnceTheWorkerHasCheckpointed() {
  auto w = makeWindow();
  w->setCloseQuestion([](int) { return Choice::StopRuns; });
  ServiceRun* run = startDemo(w.get());
  QTRY_VERIFY_WITH_TIMEOUT(run->lastStep() >= 2, 10000);
  QVERIFY(!w->close());  // not yet: the worker is saving
  QCOMPARE(run->state(), ServiceRun::State::Stopping);
  QVERIFY(w->isVisible());
  QTRY_VERIFY_WITH_TIMEOUT(!w->isVisible(), 10000);  // closed by itself once the run ended
  QCOMPARE(run->state(), ServiceRun::State::Stopped);
  QCOMPARE(run->exitCode(), 10);
  QVERIFY(QFileInfo::exists(run->lastCheckpoint() + QStringLiteral("/MANIFEST")));
}

void TestCloseWithRuns::leaveRunningClosesAndTheWorkerGoesOn() {
  auto w = makeWindow();
  w->setCloseQuestion([](int) { return Choice::LeaveRunning; });
  ServiceRun* run = startDemo(w.get());
  QTRY_VERIFY_WITH_TIMEOUT(run->lastStep() >= 1 && run->pid() > 0, 10000);
  const qint64 pid = run->pid();
  const QString metrics = run->metricsPath();
  QVERIFY(w->close());
  QCOMPARE(run->state(), ServiceRun::State::Detached);
  w.reset();  // the window and its services are gone, as after the app exits
  const qint64 size = QFileInfo(metrics).size();
  QTRY_VERIFY_WITH_TIMEOUT(QFileInfo(metrics).size() > size, 5000);
  QCOMPARE(::kill(static_cast<pid_t>(pid), SIGKILL), 0);
}

void TestCloseWithRuns::noQuestionWithoutActiveRuns() {
  auto w = makeWindow();
  bool asked = false;
  w->setCloseQuestion([&](int) {
    asked = true;
    return Choice::Cancel;
  });
  QVERIFY(w->close());
  QVERIFY(!asked);
}

QTEST_MAIN(TestCloseWithRuns)
#include "test_closewithruns.moc"
