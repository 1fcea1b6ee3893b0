// The Live dashboard under load and on screen: fed a million steps and then a fast stream, it
// stays responsive (each plot replots at most ~25 times a second, the event loop is never
// stalled long), and a realistic 2-rank run (rank 1 waits longer on communication) on the real
// Live page at 1280x800 is saved to FLOTILLA_SCREENSHOT_DIR for a person to look at.
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QPushButton>
#include <QTemporaryDir>
#include <QTimer>
#include <QtTest>

#include <cmath>

#include "fake_worker.h"
#include "ui/live/livedashboard.h"
#include "ui/live/livepage.h"
#include "ui/plot/chartplot.h"
#include "ui/plot/lossplot.h"
#include "ui/plot/rankbarsplot.h"
#include "ui/runs/localruns.h"
#include "ui/runs/servicerun.h"

// A fake worker script's first lines: into the run folder the service passes (--out-dir DIR).
#define kCdOutDir "while [ $# -gt 0 ]; do [ \"$1\" = --out-dir ] && cd \"$2\"; shift; done\n"

using flotilla::ui::LiveDashboard;
using flotilla::ui::LiveData;
using flotilla::ui::LivePage;
using flotilla::ui::ServiceRun;

namespace {

LiveData::StepSample sampleAt(qint64 step) {
  LiveData::StepSample s;
  const double x = double(step);
  s.step = step;
  s.time = 1.7e9 + x * 0.001;
  s.tokens = x * 4096;
  s.loss = 1.0 + 5.0 * std::exp(-x / 50000.0) + 0.2 * std::sin(x * 2.1);
  s.lr = 3e-4;
  s.tokensPerSec = 4e6 + 1e5 * std::sin(x * 0.01);
  s.mfu = 0.4;
  s.stepMs = 1;
  s.total = {0, 0.6, 0.2, 0.05, 0.05};
  s.ranks = {{0, 0.6, 0.2, 0.05, 0.05}, {1, 0.55, 0.35, 0.05, 0.05}};
  s.slowestRank = 1;
  s.peakRssBytes = 2e9;
  return s;
}

}  // namespace

class TestLiveStream : public QObject {
  Q_OBJECT

 private slots:
  void aMillionPointsStayResponsive();
  void screenshotOfAMultiRankRun();
  void aLargeFileIsReplayedOffTheUiThread();
};

void TestLiveStream::aMillionPointsStayResponsive() {
  LiveDashboard dash;
  dash.resize(1280, 720);
  dash.show();
  QVERIFY(QTest::qWaitForWindowExposed(&dash));
  constexpr qint64 kPoints = 1'000'000;
  dash.data().reserve(kPoints + 50'000);
  for (qint64 step = 1; step <= kPoints; ++step) dash.data().appendStep(sampleAt(step));
  dash.dataChanged();
  QElapsedTimer first;
  first.start();
  dash.refreshAll();
  qInfo("1M steps: first draw of all %lld plots %lld ms", static_cast<long long>(dash.plots().size()),
        static_cast<long long>(first.elapsed()));
  QCOMPARE(dash.lossPlot()->smoothedValues().size(), kPoints);

  // Stream 2,000 steps/s for 2 s through the page's mechanism: one 40 ms refresh timer; a 1 ms
  // heartbeat measures the longest stall of the event loop.
  QVector<int> before;
  for (auto* p : dash.plots()) before << p->replotCount();
  qint64 step = kPoints, fed = 0;
  double worstGap = 0;
  QElapsedTimer clock, beat;
  QTimer feed, redraw, heartbeat;
  feed.setTimerType(Qt::PreciseTimer);
  heartbeat.setTimerType(Qt::PreciseTimer);
  clock.start();
  QObject::connect(&feed, &QTimer::timeout, [&] {
    const qint64 due = 2 * clock.elapsed();
    while (fed < due) {
      dash.data().appendStep(sampleAt(++step));
      ++fed;
    }
  });
  QObject::connect(&redraw, &QTimer::timeout, [&] { dash.refresh(); });
  QObject::connect(&heartbeat, &QTimer::timeout, [&] {
    worstGap = std::max(worstGap, double(beat.nsecsElapsed()) / 1e6);
    beat.restart();
  });
  beat.start();
  feed.start(1);
  redraw.start(LivePage::kRefreshMs);
  heartbeat.start(1);
  QTest::qWait(2000);
  feed.stop();
  redraw.stop();
  heartbeat.stop();
  const double seconds = double(clock.elapsed()) / 1000.0;
  int most = 0;
  QStringList counts;
  for (qsizetype i = 0; i < dash.plots().size(); ++i) {
    const int n = dash.plots()[i]->replotCount() - before[i];
    most = std::max(most, n);
    counts << QStringLiteral("%1 %2").arg(dash.plots()[i]->plotWidget()->objectName()).arg(n);
  }
  qInfo("streamed %lld steps in %.2f s; replots per plot: %s; longest event-loop stall %.1f ms",
        static_cast<long long>(fed), seconds, qPrintable(counts.join(QStringLiteral(", "))), worstGap);
  QVERIFY(fed > 1000);
  // At most one replot per 40 ms tick per plot: <= 25/s (+1 for a tick at the edge).
  QVERIFY2(most <= int(25 * seconds) + 1, qPrintable(counts.join(QStringLiteral(", "))));
  QVERIFY2(most >= 5, qPrintable(counts.join(QStringLiteral(", "))));  // and it did keep drawing
  // Generous for a shared 2-core box; the benchmark reports the real figure (target < 50 ms).
  QVERIFY2(worstGap < 400, qPrintable(QString::number(worstGap)));
  // Everything fed is drawn once the stream stops.
  dash.refreshAll();
  QCOMPARE(dash.lossPlot()->smoothedValues().size(), kPoints + fed);
}

void TestLiveStream::screenshotOfAMultiRankRun() {
  // A stand-in worker that writes a realistic 2-rank run and waits to be stopped.
  QTemporaryDir tmp(QStringLiteral(FLOTILLA_TEST_TMP "/live_shot-XXXXXX"));
  QVERIFY(tmp.isValid());
  fake_worker::Synthetic s;
  QFile records(tmp.filePath(QStringLiteral("records.jsonl")));
  QVERIFY(records.open(QIODevice::WriteOnly));
  records.write(fake_worker::toJsonLines(fake_worker::syntheticRun(s)));
  records.close();
  const QString script = tmp.filePath(QStringLiteral("worker.sh"));
  QFile sh(script);
  QVERIFY(sh.open(QIODevice::WriteOnly));
  // Started as the runs service starts a demo worker: `worker demo --out-dir DIR ...` (the records
  // file comes in $FAKE_ARG).
  sh.write("#!/bin/sh\ntrap 'exit 10' TERM\n" kCdOutDir "cat \"$FAKE_ARG\" >> metrics.jsonl\nwhile :; do sleep 0.05; done\n");
  sh.close();
  sh.setPermissions(QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ExeOwner);

  qputenv("FAKE_ARG", records.fileName().toUtf8());
  flotilla::ui::LocalRuns runs(tmp.filePath(QStringLiteral("ws")));
  runs.setWorkerPath(script);
  ServiceRun* started = runs.startDemo();
  QVERIFY(started);
  ServiceRun& run = *started;
  LivePage page;
  page.resize(1280, 800);
  page.show();
  QVERIFY(QTest::qWaitForWindowExposed(&page));
  page.setRun(&run);
  page.dashboard()->data().setCost(fake_worker::cost(s));  // what the store would say it costs
  QTRY_VERIFY_WITH_TIMEOUT(page.dashboard()->data().steps().rows() == s.steps, 10000);
  QTest::qWait(3 * LivePage::kRefreshMs);
  page.dashboard()->refreshAll();
  QVERIFY(page.checkpointButton()->isEnabled());
  // Every plot shows data: no empty-state message anywhere, but the GPU utilisation plot's honest
  // one (the worker's records carry GPU memory, not utilisation).
  for (auto* p : page.dashboard()->plots())
    if (p != page.dashboard()->gpuPlot())
      QVERIFY2(!p->messageVisible(), qPrintable(p->plotWidget()->objectName() + QStringLiteral(": ") + p->message()));
  QVERIFY(page.dashboard()->gpuPlot()->message().contains(QStringLiteral("not in the worker's records")));
  QCOMPARE(page.dashboard()->rankBars()->rankLabel(1), QStringLiteral("1 (slowest)"));
  QVERIFY(page.dashboard()->rankBars()->drawnSegment(1, 1) > 2 * page.dashboard()->rankBars()->drawnSegment(0, 1));

  const QString dir = qEnvironmentVariable("FLOTILLA_SCREENSHOT_DIR", QStringLiteral(FLOTILLA_SCREENSHOT_DIR));
  QDir().mkpath(dir);
  const QString path = dir + QStringLiteral("/live-dashboard.png");
  QVERIFY(page.grab().save(path));
  qInfo("saved %s", qPrintable(path));
  // The same run by wall time on a log scale.
  page.dashboard()->setXAxisKind(flotilla::ui::XAxisKind::WallTime);
  page.dashboard()->setLogY(true);
  page.dashboard()->refreshAll();
  QVERIFY(page.grab().save(dir + QStringLiteral("/live-dashboard-walltime-log.png")));
  run.kill();
  QTRY_VERIFY_WITH_TIMEOUT(!run.isActive(), 5000);
}

void TestLiveStream::aLargeFileIsReplayedOffTheUiThread() {
  // A run followed late whose history is past kSyncReplayRecords: the page replays the watcher's
  // feed on a thread; records arriving meanwhile are held and applied after it, none lost or doubled.
  QTemporaryDir tmp(QStringLiteral(FLOTILLA_TEST_TMP "/live_replay-XXXXXX"));
  QVERIFY(tmp.isValid());
  fake_worker::Synthetic s;
  s.steps = 14000;
  const QList<QJsonObject> all = fake_worker::syntheticRun(s);
  const qsizetype cut = all.size() - 100;  // the last 100 records come after the replay started
  const QByteArray head = fake_worker::toJsonLines(all.mid(0, cut));
  QVERIFY(cut > LivePage::kSyncReplayRecords);
  for (const auto& [name, bytes] : {std::pair{QStringLiteral("head.jsonl"), head},
                                    std::pair{QStringLiteral("tail.jsonl"), fake_worker::toJsonLines(all.mid(cut))}}) {
    QFile f(tmp.filePath(name));
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(bytes);
  }
  const QString script = tmp.filePath(QStringLiteral("worker.sh"));
  QFile sh(script);
  QVERIFY(sh.open(QIODevice::WriteOnly));
  sh.write("#!/bin/sh\ntrap 'exit 10' TERM\n" kCdOutDir "cat \"$FAKE_ARG/head.jsonl\" >> metrics.jsonl\n"
           "while [ ! -e \"$FAKE_ARG/go\" ]; do sleep 0.02; done\ncat \"$FAKE_ARG/tail.jsonl\" >> metrics.jsonl\n"
           "while :; do sleep 0.05; done\n");
  sh.close();
  sh.setPermissions(QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ExeOwner);
  qputenv("FAKE_ARG", tmp.path().toUtf8());
  flotilla::ui::LocalRuns runs(tmp.filePath(QStringLiteral("ws")));
  runs.setWorkerPath(script);
  ServiceRun* started = runs.startDemo();
  QVERIFY(started);
  ServiceRun& run = *started;
  QTRY_VERIFY_WITH_TIMEOUT(run.deliveredRecords() == cut, 20000);

  LivePage page;
  page.resize(1280, 800);
  page.show();
  QVERIFY(QTest::qWaitForWindowExposed(&page));
  page.setRun(&run);
  QVERIFY(page.replaying());
  QFile go(tmp.filePath(QStringLiteral("go")));
  QVERIFY(go.open(QIODevice::WriteOnly));
  go.close();
  QTRY_VERIFY_WITH_TIMEOUT(!page.replaying(), 20000);
  QTRY_VERIFY_WITH_TIMEOUT(page.dashboard()->data().steps().rows() == s.steps, 20000);
  const QVector<double>& steps = page.dashboard()->data().steps().values(QStringLiteral("step"));
  for (int i = 0; i < s.steps; ++i) QCOMPARE(steps[i], double(i + 1));
  QCOMPARE(page.dashboard()->data().evals().rows(), s.steps / 50);
  run.kill();
  QTRY_VERIFY_WITH_TIMEOUT(!run.isActive(), 5000);
}

QTEST_MAIN(TestLiveStream)
#include "test_live_stream.moc"
