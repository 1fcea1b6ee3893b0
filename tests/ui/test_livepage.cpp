// The Live page following a run of the fake worker: the title, state and status line, the log
// pane, Stop, Checkpoint now and Kill enabled only while they mean something (Checkpoint now
// really sends SIGUSR1 and the checkpoint record arrives; Kill asks first), the plot drawing the
// run's records, replots coalesced by the page's 40 ms timer however fast records arrive, and a
// run followed late replayed from its metrics file.
#include <QElapsedTimer>
#include <QFile>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QSlider>
#include <QTemporaryDir>
#include <QtTest>

#include "fake_worker.h"
#include "ui/common/numberformat.h"
#include "ui/live/livedashboard.h"
#include "ui/live/livepage.h"
#include "ui/live/logfind.h"
#include "ui/plot/lossplot.h"
#include "ui/plot/seriesstore.h"
#include "ui/plot/smoothing.h"
#include "ui/runs/servicerun.h"
#include "ui/runs/localruns.h"

using flotilla::ui::LivePage;
using flotilla::ui::ServiceRun;
using flotilla::ui::LocalRuns;

class TestLivePage : public QObject {
  Q_OBJECT

 private slots:
  void initTestCase();
  void followsARunAndStopsIt();
  void replotsAreCoalesced();
  void forgetsADeletedRun();
  void checkpointNowSendsTheRequest();
  void killAsksFirst();
  void followingLateReplaysTheFile();
  void aTinyLossIsNotShownAsZero();
  void timeLeftFollowsTheRunsMeasuredPace();
  void theLogCanBeSearched();

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
  ServiceRun* run = runs.startDemo();
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
               status.contains(QStringLiteral("running time")),
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

  QSignalSpy finished(run, &ServiceRun::finished);
  QTest::mouseClick(page.stopButton(), Qt::LeftButton);
  QVERIFY(!page.stopButton()->isEnabled());  // no second SIGTERM while it saves
  QVERIFY(page.killButton()->isEnabled());   // but a stuck save can still be killed
  QVERIFY(page.logText().contains(QStringLiteral("stop requested (SIGTERM)")));
  QVERIFY(finished.wait(10000));
  QCOMPARE(run->exitCode(), 10);
  QTRY_VERIFY(page.logText().contains(QStringLiteral("worker ended: stopped (on request)")));
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
  ServiceRun* run = runs.startDemo();
  QVERIFY(run);
  page.setRun(run);
  const int before = page.lossPlot()->replotCount();
  QElapsedTimer clock;
  clock.start();
  QSignalSpy finished(run, &ServiceRun::finished);
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
  auto* run = new ServiceRun(QStringLiteral("gone"), flotilla::runs::ServiceOptions{});
  page.setRun(run);
  QCOMPARE(page.titleText(), QStringLiteral("gone"));
  delete run;
  QCOMPARE(page.run(), nullptr);
  QCOMPARE(page.titleText(), QStringLiteral("No run yet"));
  QCOMPARE(page.series(), nullptr);
}

void TestLivePage::checkpointNowSendsTheRequest() {
  qputenv("FAKE_STEP_S", "0.05");
  LocalRuns runs(m_tmp.filePath(QStringLiteral("ws-ckpt")));
  runs.setWorkerPath(m_fake);
  runs.setDemoSteps(100000);
  LivePage page;
  page.resize(1100, 750);
  page.show();
  QVERIFY(QTest::qWaitForWindowExposed(&page));
  QVERIFY(!page.checkpointButton()->isEnabled());
  ServiceRun* run = runs.startDemo();
  qunsetenv("FAKE_STEP_S");
  QVERIFY(run);
  page.setRun(run);
  QTRY_VERIFY_WITH_TIMEOUT(page.series()->size(QLatin1String(flotilla::ui::kSeriesLoss)) >= 2, 10000);
  QVERIFY(page.checkpointButton()->isEnabled());
  QSignalSpy checkpoints(run, &ServiceRun::checkpointReceived);
  QTest::mouseClick(page.checkpointButton(), Qt::LeftButton);
  QVERIFY(page.logText().contains(QStringLiteral("checkpoint requested (SIGUSR1)")));
  // The child got SIGUSR1 (it records it) and answered with a checkpoint record; the run goes on.
  QTRY_VERIFY_WITH_TIMEOUT(QFile::exists(run->runDir() + QStringLiteral("/usr1-received")), 5000);
  QTRY_VERIFY_WITH_TIMEOUT(checkpoints.size() == 1, 5000);
  QVERIFY(checkpoints.at(0).at(1).toString().contains(QStringLiteral("checkpoints/step-")));
  QTRY_VERIFY(page.logText().contains(QStringLiteral("checkpoint at step")));
  QCOMPARE(run->state(), ServiceRun::State::Running);
  run->kill();
  QTRY_VERIFY_WITH_TIMEOUT(!run->isActive(), 5000);
  QVERIFY(!page.checkpointButton()->isEnabled());
}

void TestLivePage::killAsksFirst() {
  qputenv("FAKE_STEP_S", "0.05");
  LocalRuns runs(m_tmp.filePath(QStringLiteral("ws-kill")));
  runs.setWorkerPath(m_fake);
  runs.setDemoSteps(100000);
  LivePage page;
  page.show();
  QVERIFY(QTest::qWaitForWindowExposed(&page));
  ServiceRun* run = runs.startDemo();
  qunsetenv("FAKE_STEP_S");
  QVERIFY(run);
  page.setRun(run);
  QTest::mouseClick(page.killButton(), Qt::LeftButton);
  QMessageBox* box = page.killConfirmation();
  QVERIFY(box);
  QVERIFY(box->isVisible());
  QCOMPARE(box->defaultButton(), box->button(QMessageBox::Cancel));
  QTest::qWait(200);  // the page keeps drawing while the question is open
  QVERIFY(run->isActive());
  box->button(QMessageBox::Cancel)->click();
  QTRY_VERIFY(!page.killConfirmation());
  QTest::qWait(150);
  QVERIFY(run->isActive());
  QTest::mouseClick(page.killButton(), Qt::LeftButton);
  QVERIFY(page.killConfirmation());
  QSignalSpy finished(run, &ServiceRun::finished);
  page.killConfirmation()->button(QMessageBox::Yes)->click();
  QVERIFY(finished.wait(5000));
  QCOMPARE(run->state(), ServiceRun::State::Killed);
}

void TestLivePage::followingLateReplaysTheFile() {
  // The page picks up a run that has been reporting for a while: what came before is read from
  // the metrics file, what comes after from the run's records, nothing twice.
  qputenv("FAKE_STEP_S", "0.02");
  LocalRuns runs(m_tmp.filePath(QStringLiteral("ws-late")));
  runs.setWorkerPath(m_fake);
  runs.setDemoSteps(60);
  ServiceRun* run = runs.startDemo();
  qunsetenv("FAKE_STEP_S");
  QVERIFY(run);
  QTRY_VERIFY_WITH_TIMEOUT(run->series().size(QLatin1String(flotilla::ui::kSeriesLoss)) >= 10, 10000);
  LivePage page;
  page.show();
  QVERIFY(QTest::qWaitForWindowExposed(&page));
  page.setRun(run);
  QVERIFY(page.dashboard()->data().steps().rows() >= 10);
  QSignalSpy finished(run, &ServiceRun::finished);
  QVERIFY(finished.wait(20000));
  const QVector<double>& steps = page.dashboard()->data().steps().values(QStringLiteral("step"));
  QCOMPARE(steps.size(), 60);
  for (int i = 0; i < 60; ++i) QCOMPARE(steps[i], double(i + 1));
  QCOMPARE(page.dashboard()->data().plannedSteps(), 60);
}

// Issue 18: a loss of 3.21e-5 read "loss 0.0000" on Live (four fixed decimals). It is shown with
// its significant digits on Live and in the runs table.
void TestLivePage::aTinyLossIsNotShownAsZero() {
  qputenv("FAKE_LOSS", "0.0000321");
  LocalRuns runs(m_tmp.filePath(QStringLiteral("ws-tiny")));
  runs.setWorkerPath(m_fake);
  runs.setDemoSteps(4);
  LivePage page;
  page.resize(1000, 700);
  page.show();
  QVERIFY(QTest::qWaitForWindowExposed(&page));
  ServiceRun* run = runs.startDemo();
  qunsetenv("FAKE_LOSS");
  QVERIFY(run);
  page.setRun(run);
  QSignalSpy finished(run, &ServiceRun::finished);
  QVERIFY(finished.wait(10000));
  QTRY_VERIFY_WITH_TIMEOUT(page.statusText().contains(QStringLiteral("Step 4")), 2000);
  const QString status = page.statusText();
  QVERIFY2(status.contains(QStringLiteral("loss 3.210e-05")), qPrintable(status));
  QVERIFY2(!status.contains(QStringLiteral("0.0000")), qPrintable(status));
  QCOMPARE(flotilla::ui::formatMetric(3.9650), QStringLiteral("3.9650"));
  QCOMPARE(flotilla::ui::formatMetric(0.01234), QStringLiteral("0.01234"));
  QCOMPARE(flotilla::ui::formatMetric(0.0001234), QStringLiteral("0.0001234"));
  QCOMPARE(flotilla::ui::formatMetric(0.0), QStringLiteral("0"));
}

// Issue 18: "ETA and time remaining on Live, from measured step times, not the plan". The fake
// worker steps every 0.05 s (plus its own overhead); Live says the time left at that pace.
void TestLivePage::timeLeftFollowsTheRunsMeasuredPace() {
  qputenv("FAKE_STEP_S", "0.05");
  qputenv("FAKE_TIME", "1");
  LocalRuns runs(m_tmp.filePath(QStringLiteral("ws-eta")));
  runs.setWorkerPath(m_fake);
  runs.setDemoSteps(100000);
  LivePage page;
  page.resize(1100, 750);
  page.show();
  QVERIFY(QTest::qWaitForWindowExposed(&page));
  ServiceRun* run = runs.startDemo();
  qunsetenv("FAKE_STEP_S");
  qunsetenv("FAKE_TIME");
  QVERIFY(run);
  page.setRun(run);
  QTRY_VERIFY_WITH_TIMEOUT(page.series()->size(QLatin1String(flotilla::ui::kSeriesLoss)) >= 12, 10000);
  page.refresh();
  const QString status = page.statusText();
  const QRegularExpression left(QStringLiteral("(\\d+):(\\d\\d):(\\d\\d) left \\(([0-9.]+) s/step\\)"));
  const QRegularExpressionMatch m = left.match(status);
  QVERIFY2(m.hasMatch(), qPrintable(status));
  const double pace = m.captured(4).toDouble();
  QVERIFY2(pace >= 0.05 && pace < 0.5, qPrintable(status));  // the sleep, plus the script's own time
  // The time left is (planned - last step) at that pace, within the rounding of the pace shown.
  const double seconds =
      m.captured(1).toDouble() * 3600 + m.captured(2).toDouble() * 60 + m.captured(3).toDouble();
  const double expected = double(100000 - run->lastStep()) * pace;
  QVERIFY2(std::abs(seconds - expected) <= 0.01 * expected + 60, qPrintable(status));
  run->kill();
  QSignalSpy finished(run, &ServiceRun::finished);
  QVERIFY(finished.wait(10000));
  page.refresh();
  QVERIFY2(!page.statusText().contains(QStringLiteral(" left")), qPrintable(page.statusText()));  // ended
}

// Issue 18: "a log pane that reads like a log": search. Every match counted and lit, Enter and
// Shift+Enter step through them, lines arriving later are searched too, Ctrl+F reaches the field.
void TestLivePage::theLogCanBeSearched() {
  QPlainTextEdit log;
  QLineEdit field;
  QLabel count;
  flotilla::ui::LogFind find(&log, &field, &count);
  for (int i = 1; i <= 30; ++i)
    log.appendPlainText(i % 10 == 0 ? QStringLiteral("step %1: Checkpoint saved").arg(i)
                                    : QStringLiteral("step %1: loss 3.%2").arg(i).arg(i));
  QTest::keyClicks(&field, QStringLiteral("checkpoint"));  // any case
  QCOMPARE(find.matchCount(), 3);
  QCOMPARE(find.currentIndex(), 2);  // the newest first
  QCOMPARE(count.text(), QStringLiteral("3 of 3"));
  QCOMPARE(find.currentLine(), QStringLiteral("step 30: Checkpoint saved"));
  QCOMPARE(log.textCursor().selectedText(), QStringLiteral("Checkpoint"));
  QCOMPARE(log.extraSelections().size(), 3);
  QTest::keyClick(&field, Qt::Key_Return);  // wraps to the first
  QCOMPARE(find.currentLine(), QStringLiteral("step 10: Checkpoint saved"));
  QTest::keyClick(&field, Qt::Key_Return, Qt::ShiftModifier);
  QCOMPARE(find.currentLine(), QStringLiteral("step 30: Checkpoint saved"));
  log.appendPlainText(QStringLiteral("step 40: checkpoint saved"));
  find.logChanged();
  QTRY_COMPARE(find.matchCount(), 4);
  QCOMPARE(find.currentLine(), QStringLiteral("step 30: Checkpoint saved"));  // the place is kept
  QTest::keyClicks(&field, QStringLiteral("zzz"));
  QCOMPARE(find.matchCount(), 0);
  QCOMPARE(count.text(), QStringLiteral("no match"));
  QVERIFY(log.extraSelections().isEmpty());
  QTest::keyClick(&field, Qt::Key_Escape);
  QVERIFY(field.text().isEmpty());
  QVERIFY(count.text().isEmpty());

  LivePage page;
  page.resize(1100, 750);
  page.show();
  QVERIFY(QTest::qWaitForWindowExposed(&page));
  auto* pageField = page.findChild<QLineEdit*>(QStringLiteral("liveLogFind"));
  QVERIFY(pageField);
  QVERIFY(page.logFind());
  page.findChild<QPlainTextEdit*>(QStringLiteral("liveLog"))->setFocus();
  QTest::keySequence(&page, QKeySequence::Find);
  QTRY_VERIFY(pageField->hasFocus());
}

QTEST_MAIN(TestLivePage)
#include "test_livepage.moc"
