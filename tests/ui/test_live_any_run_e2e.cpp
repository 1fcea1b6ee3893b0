// Issue 34 item 1 (and 3, 4): the Live page draws ANY run from the store, through one feed of
// records, from its first step, at once, whoever started it. With the real worker and the real
// run store:
//  1. a run started by `flotilla run` in a terminal's place (the headless command, a child
//     process on the same workspace) while the window is open: opened from the Runs page (and not
//     attached), Live draws it from step 1 while it runs, and when the CLI has finished it shows
//     every step and the store's end ("completed"), not a frozen "running";
//  2. after an app restart (a fresh MainWindow), the same stored run opened once draws all its
//     steps within a moment (no 5 s blank, no second open), and "Log y" redraws it at once;
//  3. a run left running (Ctrl+Q → Leave it running) and re-attached by the next window keeps its
//     history from step 1, its "/ N" total and its ETA, and its memory baseline.
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QLabel>
#include <QProcess>
#include <QSettings>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include <qcustomplot.h>
#include <signal.h>

#include "db/database.h"
#include "db/queries.h"
#include "db/run_store.h"
#include "db/workspace.h"
#include "engine/config/config_io.h"
#include "runs/placement.h"
#include "ui/live/livedashboard.h"
#include "ui/live/livepage.h"
#include "ui/main/mainwindow.h"
#include "ui/plot/lossplot.h"
#include "ui/runs/localruns.h"
#include "ui/runs/runspage.h"
#include "ui/runs/servicerun.h"
#include "ui/runs/storerunsview.h"

using flotilla::ui::LivePage;
using flotilla::ui::MainWindow;
using flotilla::ui::ServiceRun;
namespace db = flotilla::db;

namespace {

// A model that steps in milliseconds; the trainer's test pause makes each step last `sleepMs`.
flotilla::RunConfig tiny(const std::string& name, int64_t steps) {
  flotilla::RunConfig c;
  c.run.name = name;
  c.model.preset = "custom";
  c.model.n_layer = 1;
  c.model.n_head = 2;
  c.model.n_embd = 32;
  c.model.vocab_size = 128;
  c.model.max_seq_len = 32;
  c.data.source = "synthetic";
  c.data.synthetic_tokens = 30000;
  c.train.steps = steps;
  c.train.micro_batch = 2;
  c.train.seq_len = 16;
  c.train.global_batch_tokens = 0;
  c.train.log_every = 1;
  c.optim.lr = 3e-3;
  c.optim.warmup_steps = 5;
  c.run.threads = 1;
  c.run.device = "cpu";
  c.checkpoint.every = 0;
  c.eval.every = 0;
  return c;
}

std::optional<db::Run> findRun(const QString& dbPath, const std::string& name) {
  const db::Database d(dbPath.toStdString());
  return db::find_run(d, name);
}

size_t lossRows(const QString& dbPath, int64_t id) {
  const db::Database d(dbPath.toStdString());
  return db::metric_points(d, id, "loss").size();
}

LivePage* livePage(MainWindow* w) { return qobject_cast<LivePage*>(w->page(MainWindow::Live)); }

// The loss plot as drawn (not the data behind it): the points it smoothed at its last replot.
qsizetype drawnLoss(LivePage* live) { return live->lossPlot()->smoothedValues().size(); }

double firstStep(LivePage* live) {
  const auto& steps = live->dashboard()->data().steps().values(QStringLiteral("step"));
  return steps.isEmpty() ? -1 : steps.front();
}

QString liveState(MainWindow* w) {
  return w->page(MainWindow::Live)->findChild<QLabel*>(QStringLiteral("liveRunState"))->toolTip();
}

}  // namespace

class TestLiveAnyRun : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void aRunStartedByTheCliIsDrawnFromItsFirstStep();
  void aStoredRunIsDrawnAtOnceAfterARestart();
  void aReattachedRunKeepsItsWholeHistory();

 private:
  std::unique_ptr<MainWindow> makeWindow() {
    auto w = std::make_unique<MainWindow>(m_workspace);
    w->localRuns()->setWorkerPath(QStringLiteral(FLOTILLA_WORKER_PATH));
    w->resize(1280, 800);
    w->show();
    if (!QTest::qWaitForWindowExposed(w.get())) qWarning("window not exposed");
    return w;
  }
  flotilla::ui::StoreRunsView* runsView(MainWindow* w) {
    return qobject_cast<flotilla::ui::RunsPage*>(w->page(MainWindow::Runs))->storeView();
  }

  QTemporaryDir m_tmp{QStringLiteral(FLOTILLA_TEST_TMP "/live_any_run-XXXXXX")};
  flotilla::ui::WorkspaceInfo m_workspace;
  qint64 m_cliRun = 0;
};

void TestLiveAnyRun::initTestCase() {
  QVERIFY(m_tmp.isValid());
  QStandardPaths::setTestModeEnabled(true);
  QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, m_tmp.filePath(QStringLiteral("config")));
  const std::string dir = m_tmp.filePath(QStringLiteral("workspace")).toStdString();
  db::ensure_workspace_dir(dir);
  const db::Database d(db::workspace_database_path(dir));
  m_workspace.directory = QString::fromStdString(dir);
  m_workspace.databasePath = QString::fromStdString(d.path());
}

void TestLiveAnyRun::aRunStartedByTheCliIsDrawnFromItsFirstStep() {
  auto w = makeWindow();
  const QString config = m_tmp.filePath(QStringLiteral("cli-run.toml"));
  {
    QFile f(config);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(QByteArray::fromStdString(flotilla::config_to_toml(tiny("cli-run", 60))));
  }
  // `flotilla run` in a terminal: another process, the same workspace store.
  QProcess cli;
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  env.insert(QStringLiteral("FLOTILLA_TEST_STEP_SLEEP_MS"), QStringLiteral("120"));
  cli.setProcessEnvironment(env);
  cli.setProcessChannelMode(QProcess::MergedChannels);
  cli.setWorkingDirectory(m_tmp.path());
  cli.start(QStringLiteral(FLOTILLA_HEADLESS_PATH),
            {QStringLiteral("--workspace"), m_workspace.directory, QStringLiteral("run"), config});
  QVERIFY2(cli.waitForStarted(10000), qPrintable(cli.errorString()));
  auto stopCli = qScopeGuard([&] {
    if (cli.state() != QProcess::NotRunning) {
      cli.terminate();
      cli.waitForFinished(30000);
    }
  });
  std::optional<db::Run> stored;
  QTRY_VERIFY_WITH_TIMEOUT((stored = findRun(m_workspace.databasePath, "cli-run")) &&
                               lossRows(m_workspace.databasePath, stored->id) >= 5,
                           60000);
  m_cliRun = stored->id;
  QVERIFY2(cli.state() == QProcess::Running, cli.readAll().constData());

  // Runs → open it; a terminal watches it, so the window does not take it over: it follows it.
  flotilla::ui::StoreRunsView* view = runsView(w.get());
  view->confirmAttach = [](const QString&, const QString&) { return false; };
  view->openLive(m_cliRun);
  LivePage* live = livePage(w.get());
  QVERIFY(live->run());
  QCOMPARE(live->run()->storeId(), m_cliRun);
  QCOMPARE(w->currentPage(), int(MainWindow::Live));
  // Drawn from step 1 while it runs, and it keeps growing (not a snapshot).
  QTRY_VERIFY_WITH_TIMEOUT(drawnLoss(live) >= 5, 5000);
  QCOMPARE(firstStep(live), 1.0);
  const qsizetype seen = drawnLoss(live);
  QTRY_VERIFY_WITH_TIMEOUT(drawnLoss(live) > seen + 3, 20000);
  QVERIFY2(live->statusText().startsWith(QStringLiteral("Step ")) &&
               live->statusText().contains(QStringLiteral(" / 60")),
           qPrintable(live->statusText()));
  QVERIFY2(liveState(w.get()).startsWith(QStringLiteral("running")), qPrintable(liveState(w.get())));
  QVERIFY(cli.state() == QProcess::Running);

  // The CLI finishes: the page shows every step and the store's end, with no reopening.
  QVERIFY(cli.waitForFinished(120000));
  const QByteArray out = cli.readAll();
  QVERIFY2(cli.exitCode() == 0, out.constData());
  QTRY_COMPARE_WITH_TIMEOUT(liveState(w.get()), QStringLiteral("completed"), 10000);
  QTRY_COMPARE_WITH_TIMEOUT(drawnLoss(live), qsizetype(60), 10000);
  QCOMPARE(firstStep(live), 1.0);
  QVERIFY2(live->statusText().startsWith(QStringLiteral("Step 60 / 60")), qPrintable(live->statusText()));
  QVERIFY(live->dashboard()->data().baselineRssMib() > 0);  // the worker's run_start, from the store
  const QString dir =
      qEnvironmentVariable("FLOTILLA_SCREENSHOT_DIR", QStringLiteral(FLOTILLA_SCREENSHOT_DIR));
  QVERIFY(w->grab().save(dir + QStringLiteral("/live-cli-run.png")));
}

void TestLiveAnyRun::aStoredRunIsDrawnAtOnceAfterARestart() {
  QVERIFY(m_cliRun > 0);
  auto w = makeWindow();  // the app started again: nothing of the run in memory
  LivePage* live = livePage(w.get());
  runsView(w.get())->openLive(m_cliRun);
  QVERIFY(live->run());
  // All of it, drawn, within a moment of the first open.
  QTRY_COMPARE_WITH_TIMEOUT(drawnLoss(live), qsizetype(60), 1500);
  QCOMPARE(firstStep(live), 1.0);
  QVERIFY2(live->statusText().startsWith(QStringLiteral("Step 60 / 60")), qPrintable(live->statusText()));
  QCOMPARE(liveState(w.get()), QStringLiteral("completed"));
  QTest::qWait(300);  // the page settles: its timer stops once nothing is left to draw

  // Log y on an ended run redraws at once (no refresh timer needed).
  auto* plot = qobject_cast<QCustomPlot*>(live->lossPlot()->plotWidget());
  const int replots = live->lossPlot()->replotCount();
  live->dashboard()->logBox()->setChecked(true);
  QVERIFY(live->lossPlot()->replotCount() > replots);
  QCOMPARE(plot->yAxis->scaleType(), QCPAxis::stLogarithmic);
  const QString dir =
      qEnvironmentVariable("FLOTILLA_SCREENSHOT_DIR", QStringLiteral(FLOTILLA_SCREENSHOT_DIR));
  QVERIFY(w->grab().save(dir + QStringLiteral("/live-stored-run-log-y.png")));
}

void TestLiveAnyRun::aReattachedRunKeepsItsWholeHistory() {
  qputenv("FLOTILLA_TEST_STEP_SLEEP_MS", "60");
  auto unpace = qScopeGuard([] { qunsetenv("FLOTILLA_TEST_STEP_SLEEP_MS"); });
  qint64 id = 0;
  QString runDir;
  {
    auto w = makeWindow();
    QString error;
    ServiceRun* run =
        w->localRuns()->start(tiny("left-running", 200), flotilla::runs::Placement::here(), &error);
    QVERIFY2(run, qPrintable(error));
    id = run->storeId();
    runDir = run->runDir();
    QTRY_VERIFY_WITH_TIMEOUT(run->lastStep() >= 12 || !run->isActive(), 60000);
    QVERIFY(run->isActive());
    w->setCloseQuestion([](int) { return MainWindow::CloseChoice::LeaveRunning; });
    QVERIFY(w->close());
  }
  auto cleanup = qScopeGuard([&] {
    if (const qint64 pid = ServiceRun::liveWorkerPid(runDir); pid > 0)
      ::kill(static_cast<pid_t>(pid), SIGKILL);
  });
  QTest::qWait(1000);  // it trains on, unwatched, for a while
  auto w = makeWindow();
  QCOMPARE(w->reattachedRuns(), 1);
  LivePage* live = livePage(w.get());
  ServiceRun* run = w->localRuns()->runForStoreId(id);
  QVERIFY(run && run->isAttached());
  QCOMPARE(live->followed(), run);
  w->showPage(MainWindow::Live);  // the user goes to Live (a re-attached run does not switch to it)
  // The whole history from step 1 (1–12 were stored before the restart), the total and the ETA.
  QTRY_VERIFY_WITH_TIMEOUT(drawnLoss(live) >= 20, 20000);
  QCOMPARE(firstStep(live), 1.0);
  const auto& steps = live->dashboard()->data().steps().values(QStringLiteral("step"));
  for (qsizetype i = 0; i < steps.size(); ++i) QCOMPARE(steps[i], double(i + 1));
  QTRY_VERIFY_WITH_TIMEOUT(live->statusText().contains(QStringLiteral(" left (")), 10000);
  QVERIFY2(live->statusText().contains(QStringLiteral(" / 200")), qPrintable(live->statusText()));
  QVERIFY(live->dashboard()->data().baselineRssMib() > 0);
  QCOMPARE(live->dashboard()->data().plannedSteps(), 200);
  const QString dir =
      qEnvironmentVariable("FLOTILLA_SCREENSHOT_DIR", QStringLiteral(FLOTILLA_SCREENSHOT_DIR));
  QVERIFY(w->grab().save(dir + QStringLiteral("/live-reattached-run.png")));
  // Issue 34 item 28: with two runs to choose from, the picker is the title: the name shows once.
  if (m_cliRun > 0) {
    runsView(w.get())->openLive(m_cliRun);
    QVERIFY(live->runPicker()->isVisible());
    QCOMPARE(live->runPicker()->currentText(), QStringLiteral("cli-run"));
    QVERIFY(!live->findChild<QLabel*>(QStringLiteral("liveRunTitle"))->isVisible());
    QTRY_COMPARE_WITH_TIMEOUT(drawnLoss(live), qsizetype(60), 1500);
    QVERIFY(w->grab().save(dir + QStringLiteral("/live-two-runs.png")));
  }
  QSignalSpy finished(run, &ServiceRun::finished);
  run->stop();
  QVERIFY(finished.count() || finished.wait(60000));
}

QTEST_MAIN(TestLiveAnyRun)
#include "test_live_any_run_e2e.moc"
