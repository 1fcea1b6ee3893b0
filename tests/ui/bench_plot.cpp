// Plot speed benchmark (issue 6, Performance): a 1M-point loss series with smoothing, drawn by the
// loss plot adapter (ui/plot/lossplot) under QT_QPA_PLATFORM=offscreen; then the whole Live
// dashboard (ui/live/livedashboard: eight plots over the same 1M steps) the same way.
//   build-*/bin/bench_plot [points]
// Prints: the first draw (smooth 1M points + decimate + replot), the replot after one more point,
// the decimation alone, and, while a timer feeds 1,000 steps per second for 3 s with the plot
// refreshed every 40 ms (the Live page's rate), the longest event-loop stall, measured as the
// largest gap between ticks of a 1 ms heartbeat timer, and the slowest refresh.
#include <QApplication>
#include <QElapsedTimer>
#include <QTimer>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "ui/live/livedashboard.h"
#include "ui/plot/decimation.h"
#include "ui/plot/lossplot.h"
#include "ui/plot/plotpanel.h"
#include "ui/plot/seriesstore.h"

namespace {

double lossAt(qint64 step) {
  return 1.0 + 5.0 * std::exp(-static_cast<double>(step) / 50000.0) + 0.2 * std::sin(static_cast<double>(step) * 2.1);
}

double msSince(const QElapsedTimer& t) { return static_cast<double>(t.nsecsElapsed()) / 1e6; }

flotilla::ui::LiveData::StepSample sampleAt(qint64 step) {
  flotilla::ui::LiveData::StepSample s;
  s.step = step;
  s.time = 1.7e9 + static_cast<double>(step) * 0.001;
  s.tokens = static_cast<double>(step) * 4096;
  s.loss = lossAt(step);
  s.lr = 3e-4;
  s.tokensPerSec = 4e6 + 1e5 * std::sin(static_cast<double>(step) * 0.01);
  s.mfu = 0.4;
  s.stepMs = 1;
  s.ranks = {{0, 0.6, 0.2, 0.05, 0.05}, {1, 0.55, 0.35, 0.05, 0.05}};
  s.total = s.ranks[0];
  s.slowestRank = 1;
  s.peakRssBytes = 2e9;
  return s;
}

// The whole dashboard: first draw, one more step, and 3 s of 1,000 steps/s.
void benchDashboard(QApplication& app, qint64 points) {
  flotilla::ui::LiveDashboard dash;
  dash.resize(1280, 720);
  dash.show();
  QCoreApplication::processEvents();
  dash.data().reserve(points + 10000);
  for (qint64 step = 1; step <= points; ++step) dash.data().appendStep(sampleAt(step));
  dash.dataChanged();
  QElapsedTimer t;
  t.start();
  dash.refreshAll();
  const double first = msSince(t);
  std::vector<double> next;
  qint64 step = points;
  for (int i = 0; i < 10; ++i) {
    dash.data().appendStep(sampleAt(++step));
    t.restart();
    dash.refreshAll();
    next.push_back(msSince(t));
  }
  std::sort(next.begin(), next.end());
  std::printf("dashboard (%lld plots, 1280x720) over %lld steps: first draw %.2f ms; all plots after one more "
              "step: median %.2f ms, max %.2f ms\n",
              static_cast<long long>(dash.plots().size()), static_cast<long long>(points), first,
              next[next.size() / 2], next.back());
  double worstTick = 0, worstGap = 0;
  const int replotsBefore = dash.replotCount();
  QElapsedTimer clock, beat;
  QTimer feed, redraw, heartbeat;
  feed.setTimerType(Qt::PreciseTimer);
  heartbeat.setTimerType(Qt::PreciseTimer);
  redraw.setTimerType(Qt::PreciseTimer);
  qint64 fed = 0;
  clock.start();
  QObject::connect(&feed, &QTimer::timeout, [&] {
    const qint64 due = clock.elapsed();
    while (fed < due) {
      dash.data().appendStep(sampleAt(++step));
      ++fed;
    }
  });
  QObject::connect(&redraw, &QTimer::timeout, [&] {
    QElapsedTimer r;
    r.start();
    dash.refresh();
    worstTick = std::max(worstTick, msSince(r));
  });
  beat.start();
  QObject::connect(&heartbeat, &QTimer::timeout, [&] {
    worstGap = std::max(worstGap, msSince(beat));
    beat.restart();
  });
  feed.start(1);
  redraw.start(40);
  heartbeat.start(1);
  QTimer::singleShot(3000, &app, &QCoreApplication::quit);
  app.exec();
  std::printf("dashboard streaming 3 s at 1,000 steps/s (%lld steps, %d replots over all plots): slowest refresh "
              "tick %.2f ms, longest event-loop stall %.2f ms\n",
              static_cast<long long>(fed), dash.replotCount() - replotsBefore, worstTick, worstGap);
}

}  // namespace

int main(int argc, char** argv) {
  qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  const qint64 points = argc > 1 ? std::atoll(argv[1]) : 1'000'000;
  const QString kTrain = QStringLiteral("loss"), kVal = QStringLiteral("val_loss");

  flotilla::ui::SeriesStore store;
  flotilla::ui::LossPlot plot;
  plot.resize(1000, 500);
  plot.show();
  QCoreApplication::processEvents();
  plot.setSmoothing(0.6);
  plot.setSource(&store, kTrain, kVal);
  for (qint64 step = 1; step <= points; ++step) store.append(kTrain, static_cast<double>(step), lossAt(step));
  for (qint64 step = 1000; step <= points; step += 1000) store.append(kVal, static_cast<double>(step), lossAt(step) + 0.1);

  QElapsedTimer t;
  t.start();
  plot.refresh();
  const double first = msSince(t);

  std::vector<double> next;
  for (int i = 0; i < 20; ++i) {
    store.append(kTrain, static_cast<double>(points + 1 + i), lossAt(points + 1 + i));
    t.restart();
    plot.refresh();
    next.push_back(msSince(t));
  }
  std::sort(next.begin(), next.end());

  const auto& s = store.series(kTrain);
  QVector<qsizetype> picks;
  t.restart();
  for (int i = 0; i < 10; ++i)
    flotilla::ui::decimateIndices(s.x.constData(), s.y.constData(), s.x.size(), 0, s.x.back(), 900, &picks);
  const double decimate = msSince(t) / 10;

  std::printf("series: %lld points (+%lld validation), plot 1000x500, smoothing 0.6, %d points drawn per line\n",
              static_cast<long long>(points), static_cast<long long>(points / 1000), plot.drawnPointCount());
  std::printf("first draw (smooth all + decimate + replot): %8.2f ms\n", first);
  std::printf("replot after one more point: median %8.2f ms, max %8.2f ms (20 replots)\n", next[next.size() / 2],
              next.back());
  std::printf("decimation of the raw line alone:           %8.2f ms\n", decimate);

  // Streaming: 1,000 steps/s in 1 ms ticks, a 40 ms refresh timer, a 1 ms heartbeat measuring stalls.
  qint64 step = points + 100;
  double worstRefresh = 0, worstGap = 0;
  int refreshes = 0;
  QElapsedTimer clock, beat;
  QTimer feed, redraw, heartbeat;
  feed.setTimerType(Qt::PreciseTimer);
  heartbeat.setTimerType(Qt::PreciseTimer);
  redraw.setTimerType(Qt::PreciseTimer);
  clock.start();
  qint64 fed = 0;
  QObject::connect(&feed, &QTimer::timeout, [&] {
    // Catch up to 1,000 steps per second of wall time, whatever the timer's jitter.
    const qint64 due = clock.elapsed();
    while (fed < due) {
      ++step;
      store.append(kTrain, static_cast<double>(step), lossAt(step));
      ++fed;
    }
  });
  QObject::connect(&redraw, &QTimer::timeout, [&] {
    QElapsedTimer r;
    r.start();
    if (plot.refresh()) ++refreshes;
    worstRefresh = std::max(worstRefresh, msSince(r));
  });
  beat.start();
  QObject::connect(&heartbeat, &QTimer::timeout, [&] {
    worstGap = std::max(worstGap, msSince(beat));
    beat.restart();
  });
  feed.start(1);
  redraw.start(40);
  heartbeat.start(1);
  QTimer::singleShot(3000, &app, &QCoreApplication::quit);
  app.exec();
  std::printf("streaming 3 s at 1,000 steps/s (%lld steps fed, %d replots): slowest refresh %.2f ms, "
              "longest event-loop stall %.2f ms\n",
              static_cast<long long>(fed), refreshes, worstRefresh, worstGap);
  benchDashboard(app, points);
  return 0;
}
