// End to end with the real worker: the app (MainWindow on a temporary workspace) starts the demo
// from the Runs page, the Live page draws steps with falling loss as flotilla-worker trains, Stop
// sends SIGTERM, and the worker ends with exit 10 (or 0 if it had already finished) and a
// committed checkpoint (step-*/MANIFEST) in the run folder. Saves screenshots of the live run.
// Also reports the longest event-loop stall while the run streamed (issue 6 asks for < 50 ms).
#include <QDir>
#include <QElapsedTimer>
#include <QImage>
#include <QLabel>
#include <QPushButton>
#include <QSet>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTimer>
#include <QtTest>

#include <optional>

#include "db/database.h"
#include "db/workspace.h"
#include "ui/live/livepage.h"
#include "ui/main/mainwindow.h"
#include "ui/plot/lossplot.h"
#include "ui/plot/seriesstore.h"
#include "ui/runs/localruns.h"
#include "ui/runs/runspage.h"
#include "ui/runs/servicerun.h"

using flotilla::ui::MainWindow;
using flotilla::ui::ServiceRun;

namespace {

void checkScreenshot(const QString& path) {
  const QImage image(path);
  QVERIFY2(!image.isNull(), qPrintable(path));
  QVERIFY2(QFileInfo(path).size() > 20 * 1024,
           qPrintable(QStringLiteral("%1 is only %2 bytes").arg(path).arg(QFileInfo(path).size())));
  QSet<QRgb> colours;
  for (int y = 0; y < image.height(); y += 3)
    for (int x = 0; x < image.width(); x += 3) colours.insert(image.pixel(x, y));
  QVERIFY2(colours.size() > 64,
           qPrintable(QStringLiteral("only %1 colours in %2").arg(colours.size()).arg(path)));
}

QString runLog(const ServiceRun* run) {
  QStringList lines;
  for (const auto& l : run->log()) lines << l.text;
  return lines.join(QLatin1Char('\n'));
}

}  // namespace

class TestLiveE2e : public QObject {
  Q_OBJECT

 private slots:
  void demoTrainsLiveAndStopsWithACheckpoint();
};

void TestLiveE2e::demoTrainsLiveAndStopsWithACheckpoint() {
  QTemporaryDir tmp(QStringLiteral(FLOTILLA_TEST_TMP "/live_e2e-XXXXXX"));
  QVERIFY(tmp.isValid());
  QStandardPaths::setTestModeEnabled(true);
  QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, tmp.filePath(QStringLiteral("config")));
  const std::string dir = tmp.filePath(QStringLiteral("workspace")).toStdString();
  flotilla::db::ensure_workspace_dir(dir);
  flotilla::db::Database db(flotilla::db::workspace_database_path(dir));
  flotilla::ui::WorkspaceInfo workspace;
  workspace.directory = QString::fromStdString(dir);
  workspace.databasePath = QString::fromStdString(db.path());

  MainWindow w(workspace);
  w.localRuns()->setWorkerPath(QStringLiteral(FLOTILLA_WORKER_PATH));
  w.localRuns()->setDemoSteps(30);
  w.localRuns()->setDemoOverrides({QStringLiteral("eval.every=5")});  // validation points early
  w.resize(1280, 800);
  w.show();
  QVERIFY(QTest::qWaitForWindowExposed(&w));

  auto* runsPage = qobject_cast<flotilla::ui::RunsPage*>(w.page(MainWindow::Runs));
  auto* live = qobject_cast<flotilla::ui::LivePage*>(w.page(MainWindow::Live));
  QVERIFY(runsPage && live);
  w.showPage(MainWindow::Runs);
  QTest::mouseClick(runsPage->runDemoButton(), Qt::LeftButton);
  QCOMPARE(w.currentPage(), int(MainWindow::Live));
  ServiceRun* run = live->run();
  QVERIFY(run);
  QCOMPARE(run->state(), ServiceRun::State::Running);
  QCOMPARE(w.findChild<QLabel*>(QStringLiteral("statusRunning"))->text(), QStringLiteral("1 run running"));

  // Longest gap between ticks of a 5 ms timer = the longest the UI thread was unavailable.
  QElapsedTimer sinceTick;
  qint64 longestStall = 0;
  QTimer probe;
  probe.setInterval(5);
  connect(&probe, &QTimer::timeout, this,
          [&] { longestStall = std::max(longestStall, sinceTick.restart()); });
  sinceTick.start();
  probe.start();

  const QString loss = QLatin1String(flotilla::ui::kSeriesLoss);
  QElapsedTimer clock;
  clock.start();
  while (live->series()->size(loss) < 10 && run->isActive() && clock.elapsed() < 200'000) QTest::qWait(100);
  probe.stop();
  QVERIFY2(live->series()->size(loss) >= 10,
           qPrintable(QStringLiteral("%1 steps after %2 s; state %3; log:\n%4")
                          .arg(live->series()->size(loss))
                          .arg(clock.elapsed() / 1000)
                          .arg(run->stateText(), runLog(run))));
  const QVector<double>& y = live->series()->series(loss).y;
  QVERIFY2(y.last() < y.first(), qPrintable(QStringLiteral("loss %1 -> %2").arg(y.first()).arg(y.last())));
  qInfo("10 steps in %.1f s; loss %.4f -> %.4f; longest UI stall while streaming: %lld ms",
        clock.elapsed() / 1000.0, y.first(), y.last(), static_cast<long long>(longestStall));
  QVERIFY2(longestStall < 1000, qPrintable(QString::number(longestStall)));

  // The dashboard drew what arrived.
  QTRY_VERIFY_WITH_TIMEOUT(live->lossPlot()->smoothedValues().size() >= 10, 2000);
  QVERIFY(live->statusText().contains(QStringLiteral("/ 30")));
  QVERIFY(live->stopButton()->isEnabled());
  const QString shots = QStringLiteral(FLOTILLA_SCREENSHOT_DIR);
  QVERIFY(QDir().mkpath(shots));
  QCoreApplication::processEvents();
  const QString running = shots + QStringLiteral("/page-live-run.png");
  QVERIFY(w.grab().save(running));
  checkScreenshot(running);
  qInfo("screenshot: %s", qPrintable(running));

  // Stop: SIGTERM, checkpoint at the next step, exit 10.
  QSignalSpy finished(run, &ServiceRun::finished);
  QTest::mouseClick(live->stopButton(), Qt::LeftButton);
  QVERIFY(run->state() == ServiceRun::State::Stopping || !run->isActive());
  QVERIFY(finished.count() || finished.wait(120'000));
  QVERIFY2(run->exitCode() == 10 || run->exitCode() == 0,
           qPrintable(QStringLiteral("exit %1; log:\n%2").arg(run->exitCode()).arg(runLog(run))));
  QCOMPARE(run->exitStatus(), QProcess::NormalExit);
  if (run->exitCode() == 10) {
    QCOMPARE(run->state(), ServiceRun::State::Stopped);
    // Issue 34 #16: a Stop is said as one, not as a preemption.
    QCOMPARE(run->summaryExit(), QStringLiteral("stopped"));
    QVERIFY2(runLog(run).contains(QStringLiteral("(stopped on request)")) &&
                 runLog(run).contains(QStringLiteral("stopped on request (flotilla app)")),
             qPrintable(runLog(run)));
  }
  const QDir checkpoints(run->runDir() + QStringLiteral("/checkpoints"));
  const QStringList steps = checkpoints.entryList({QStringLiteral("step-*")}, QDir::Dirs);
  QVERIFY2(!steps.isEmpty(), qPrintable(checkpoints.path()));
  bool manifest = false;
  for (const QString& s : steps)
    manifest = manifest || QFileInfo::exists(checkpoints.filePath(s + QStringLiteral("/MANIFEST")));
  QVERIFY2(manifest, qPrintable(steps.join(QLatin1Char(' '))));
  QCOMPARE(QFileInfo(run->lastCheckpoint()).canonicalFilePath(),
           QFileInfo(checkpoints.filePath(steps.last())).canonicalFilePath());
  QCOMPARE(w.findChild<QLabel*>(QStringLiteral("statusRunning"))->text(), QStringLiteral("0 runs running"));
  QVERIFY(run->deliveredRecords() > 0);

  QTest::qWait(2 * flotilla::ui::LivePage::kRefreshMs);
  const QString stopped = shots + QStringLiteral("/page-live-stopped.png");
  QVERIFY(w.grab().save(stopped));
  checkScreenshot(stopped);
  w.showPage(MainWindow::Runs);
  QCoreApplication::processEvents();
  const QString table = shots + QStringLiteral("/page-runs-table.png");
  QVERIFY(w.grab().save(table));
  checkScreenshot(table);
}

QTEST_MAIN(TestLiveE2e)
#include "test_live_e2e.moc"
