// The Live page following a run of the fake worker: the title, state and status line, the log
// pane, Stop and Kill enabled only while they mean something, the plot drawing the run's store,
// and replots coalesced by the page's 40 ms timer however fast records arrive.
#include <QElapsedTimer>
#include <QPushButton>
#include <QSignalSpy>
#include <QSlider>
#include <QTemporaryDir>
#include <QtTest>

#include "fake_worker.h"
#include "ui/live/livepage.h"
#include "ui/plot/lossplot.h"
#include "ui/plot/seriesstore.h"
#include "ui/plot/smoothing.h"
#include "ui/runs/localrun.h"
#include "ui/runs/localruns.h"

using flotilla::ui::LivePage;
using flotilla::ui::LocalRun;
using flotilla::ui::LocalRuns;

class TestLivePage : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void followsARunAndStopsIt();
  void replotsAreCoalesced();
  void forgetsADeletedRun();

 private:
  QTemporaryDir m_tmp;
  QString m_fake;
};

void TestLivePage::initTestCase() {
  QVERIFY(m_tmp.isValid());
  m_fake = fake_worker::write(m_tmp.path());
}

void TestLivePage::followsARunAndStopsIt() {
  qputenv("FAKE_STEP_S", "0.05");
  LocalRuns runs(m_tmp.filePath(QStringLiteral("ws-follow")));
  runs.setWorkerPath(m_fake);
  runs.setDemoSteps(100000);
  LivePage page;
  page.resize(1100, 750);
  page.show();
  QVERIFY(QTest::qWaitForWindowExposed(&page));
  QVERIFY(!page.stopButton()->isEnabled());
  LocalRun* run = runs.startDemo();
  qunsetenv("FAKE_STEP_S");
  QVERIFY(run);
  page.setRun(run);
  QCOMPARE(page.run(), run);
  QCOMPARE(page.titleText(), run->name());
  QVERIFY(page.stopButton()->isEnabled());
  QVERIFY(page.killButton()->isEnabled());
  QTRY_VERIFY_WITH_TIMEOUT(page.series()->size(QLatin1String(flotilla::ui::kSeriesLoss)) >= 4, 10000);
  QTRY_VERIFY_WITH_TIMEOUT(page.statusText().contains(QStringLiteral("/ 100000")), 2000);
  const QString status = page.statusText();
  QVERIFY2(status.contains(QStringLiteral("tokens/s")) && status.contains(QStringLiteral("MFU 25.0%")) &&
               status.contains(QStringLiteral("elapsed")),
           qPrintable(status));
  QVERIFY2(page.logText().contains(QStringLiteral("--steps 100000")), qPrintable(page.logText()));
  QTRY_VERIFY_WITH_TIMEOUT(page.logText().contains(QStringLiteral("WARNING: fake warning at step 3")), 2000);
  // What the plot draws is the run's raw loss, smoothed by the reference formula.
  QTRY_VERIFY_WITH_TIMEOUT(page.lossPlot()->smoothedValues().size() >= 4, 2000);
  const QVector<double> drawn = page.lossPlot()->smoothedValues();
  const QVector<double> raw =
      page.series()->series(QLatin1String(flotilla::ui::kSeriesLoss)).y.mid(0, drawn.size());
  QCOMPARE(drawn, flotilla::ui::debiasedEma(raw, 0.6));
  // The slider re-smooths what is drawn.
  page.smoothingSlider()->setValue(90);
  QCOMPARE(page.lossPlot()->smoothing(), 0.9);

  QSignalSpy finished(run, &LocalRun::finished);
  QTest::mouseClick(page.stopButton(), Qt::LeftButton);
  QVERIFY(!page.stopButton()->isEnabled());  // no second SIGTERM while it saves
  QVERIFY(page.killButton()->isEnabled());   // but a stuck save can still be killed
  QVERIFY(page.logText().contains(QStringLiteral("stop requested (SIGTERM)")));
  QVERIFY(finished.wait(10000));
  QCOMPARE(run->exitCode(), 10);
  QTRY_VERIFY(page.logText().contains(QStringLiteral("worker ended: stopped (exit 10: preempted)")));
  QVERIFY(!page.stopButton()->isEnabled());
  QVERIFY(!page.killButton()->isEnabled());
  QVERIFY(page.findChild<QWidget*>(QStringLiteral("liveRunState")));
}

void TestLivePage::replotsAreCoalesced() {
  // 2,000 steps as fast as the fake can write them: far more records than replots.
  LocalRuns runs(m_tmp.filePath(QStringLiteral("ws-fast")));
  runs.setWorkerPath(m_fake);
  runs.setDemoSteps(2000);
  LivePage page;
  page.resize(1000, 700);
  page.show();
  QVERIFY(QTest::qWaitForWindowExposed(&page));
  LocalRun* run = runs.startDemo();
  QVERIFY(run);
  page.setRun(run);
  const int before = page.lossPlot()->replotCount();
  QElapsedTimer clock;
  clock.start();
  QSignalSpy finished(run, &LocalRun::finished);
  QVERIFY(finished.wait(60000));
  QTest::qWait(3 * LivePage::kRefreshMs);
  const int replots = page.lossPlot()->replotCount() - before;
  const qint64 ms = clock.elapsed();
  qInfo("%d steps, %d replots in %lld ms", 2000, replots, static_cast<long long>(ms));
  QCOMPARE(page.series()->size(QLatin1String(flotilla::ui::kSeriesLoss)), 2000);
  QCOMPARE(page.lossPlot()->smoothedValues().size(), 2000);  // the last refresh drew everything
  // At most one replot per 40 ms tick (+ state changes and the first draw), far fewer than records.
  QVERIFY2(replots <= ms / LivePage::kRefreshMs + 6,
           qPrintable(QStringLiteral("%1 replots in %2 ms").arg(replots).arg(ms)));
  QVERIFY(replots < 2000 / 4);
}

void TestLivePage::forgetsADeletedRun() {
  LivePage page;
  auto* run = new LocalRun(QStringLiteral("gone"), m_tmp.filePath(QStringLiteral("gone")));
  page.setRun(run);
  QCOMPARE(page.titleText(), QStringLiteral("gone"));
  delete run;
  QCOMPARE(page.run(), nullptr);
  QCOMPARE(page.titleText(), QStringLiteral("No run yet"));
  QCOMPARE(page.series(), nullptr);
}

QTEST_MAIN(TestLivePage)
#include "test_livepage.moc"
