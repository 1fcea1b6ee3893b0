// The loss plot adapter (ui/plot/lossplot) over a SeriesStore: it draws what the store holds,
// smoothed by the reference formula (also after the smoothing changes, recomputed from the raw
// values), copies only appended points, starts over when the store is cleared, and replots only
// when something changed, once per refresh however many points arrived.
#include <QElapsedTimer>
#include <QtTest>

#include <cmath>

#include "ui/plot/lossplot.h"
#include "ui/plot/seriesstore.h"
#include "ui/plot/smoothing.h"

using flotilla::ui::LossPlot;
using flotilla::ui::SeriesStore;

namespace {
const QString kTrain = QStringLiteral("loss");
const QString kVal = QStringLiteral("val_loss");

double lossAt(int step) { return 1.0 + 5.0 * std::exp(-step / 50.0) + 0.2 * std::sin(step * 2.1); }
}  // namespace

class TestLossPlot : public QObject {
  Q_OBJECT

 private slots:
  void drawsTheStoreSmoothedByTheReference();
  void changingTheSmoothingResmoothsTheRawValues();
  void replotsOnlyWhenSomethingChanged();
  void clearingTheStoreStartsOver();
  void detachedShowsTheMessage();
  void aMillionPointsReplotQuickly();
};

void TestLossPlot::drawsTheStoreSmoothedByTheReference() {
  SeriesStore store;
  LossPlot plot;
  plot.resize(800, 400);
  plot.setSmoothing(0.6);
  plot.setSource(&store, kTrain, kVal);
  QVector<double> raw;
  for (int step = 1; step <= 120; ++step) {
    store.append(kTrain, step, lossAt(step));
    raw.append(lossAt(step));
    if (step % 25 == 0) store.append(kVal, step, lossAt(step) + 0.1);
    if (step % 17 == 0) QVERIFY(plot.refresh());  // incremental copies at uneven boundaries
  }
  QVERIFY(plot.refresh());
  QCOMPARE(plot.smoothedValues(), flotilla::ui::debiasedEma(raw, 0.6));
  // Independently of debiasedEma: debiasing makes the first smoothed point the first raw one,
  // and the second (0.24*x1 + 0.4*x2) / 0.64.
  QCOMPARE(plot.smoothedValues()[0], raw[0]);
  QVERIFY(std::abs(plot.smoothedValues()[1] - (0.24 * raw[0] + 0.4 * raw[1]) / 0.64) < 1e-12);
  QCOMPARE(plot.validationPointCount(), 4);
}

void TestLossPlot::changingTheSmoothingResmoothsTheRawValues() {
  SeriesStore store;
  LossPlot plot;
  plot.setSource(&store, kTrain, kVal);
  QVector<double> raw;
  for (int step = 1; step <= 60; ++step) {
    store.append(kTrain, step, lossAt(step));
    raw.append(lossAt(step));
  }
  QVERIFY(plot.refresh());
  plot.setSmoothing(0.9);
  QVERIFY(plot.refresh());  // a setting change replots at the same store revision
  QCOMPARE(plot.smoothedValues(), flotilla::ui::debiasedEma(raw, 0.9));
  plot.setSmoothing(0.0);
  QVERIFY(plot.refresh());
  QCOMPARE(plot.smoothedValues(), raw);
  // New points after the change continue with the new weight.
  store.append(kTrain, 61, lossAt(61));
  raw.append(lossAt(61));
  plot.setSmoothing(0.3);
  QVERIFY(plot.refresh());
  QCOMPARE(plot.smoothedValues(), flotilla::ui::debiasedEma(raw, 0.3));
}

void TestLossPlot::replotsOnlyWhenSomethingChanged() {
  SeriesStore store;
  LossPlot plot;
  plot.setSource(&store, kTrain, kVal);
  QVERIFY(plot.refresh());  // the first draw
  const int base = plot.replotCount();
  QVERIFY(!plot.refresh());
  QVERIFY(!plot.refresh());
  QCOMPARE(plot.replotCount(), base);
  for (int step = 1; step <= 5000; ++step) store.append(kTrain, step, lossAt(step));
  QVERIFY(plot.refresh());  // 5,000 points, one replot
  QCOMPARE(plot.replotCount(), base + 1);
  QVERIFY(!plot.refresh());
  QCOMPARE(plot.smoothedValues().size(), 5000);
}

void TestLossPlot::clearingTheStoreStartsOver() {
  SeriesStore store;
  LossPlot plot;
  plot.setSource(&store, kTrain, kVal);
  for (int step = 1; step <= 10; ++step) store.append(kTrain, step, 100.0 + step);
  QVERIFY(plot.refresh());
  store.clear();
  QVector<double> raw;
  for (int step = 1; step <= 12; ++step) {
    store.append(kTrain, step, lossAt(step));
    raw.append(lossAt(step));
  }
  QVERIFY(plot.refresh());
  QCOMPARE(plot.smoothedValues(), flotilla::ui::debiasedEma(raw, plot.smoothing()));
}

void TestLossPlot::detachedShowsTheMessage() {
  SeriesStore store;
  store.append(kTrain, 1, 2.0);
  LossPlot plot;
  plot.setSource(&store, kTrain, kVal);
  QVERIFY(plot.refresh());
  QCOMPARE(plot.smoothedValues().size(), 1);
  plot.setSource(nullptr, {}, {});
  plot.setMessage(QStringLiteral("No run selected"));
  QVERIFY(plot.refresh());
  QVERIFY(plot.smoothedValues().isEmpty());
  QVERIFY(!plot.refresh());
}

void TestLossPlot::aMillionPointsReplotQuickly() {
  // Issue 6's budget is 30 ms for a 1M-point replot with smoothing. Only decimated points reach
  // QCustomPlot, so a replot after one more point costs ~10-15 ms here (tests/ui/bench_plot.cpp
  // measures it); the bound leaves room for a loaded 2-core CI box and still catches a path that
  // hands QCustomPlot every point again (~170 ms before decimation).
  SeriesStore store;
  LossPlot plot;
  plot.resize(1000, 500);
  plot.show();
  QVERIFY(QTest::qWaitForWindowExposed(&plot));
  plot.setSource(&store, kTrain, kVal);
  for (int step = 1; step <= 1'000'000; ++step) store.append(kTrain, step, lossAt(step));
  QElapsedTimer first;
  first.start();
  QVERIFY(plot.refresh());
  const qint64 firstMs = first.elapsed();
  store.append(kTrain, 1'000'001, lossAt(1'000'001));
  QElapsedTimer next;
  next.start();
  QVERIFY(plot.refresh());
  const qint64 nextMs = next.elapsed();
  qInfo("1M points: first draw (smooth + decimate + replot) %lld ms, replot after one more point %lld ms",
        static_cast<long long>(firstMs), static_cast<long long>(nextMs));
  QVERIFY2(nextMs < 120, qPrintable(QString::number(nextMs)));
  QVERIFY2(plot.drawnPointCount() < 5000, qPrintable(QString::number(plot.drawnPointCount())));
  QCOMPARE(plot.smoothedValues().size(), 1'000'001);
}

QTEST_MAIN(TestLossPlot)
#include "test_lossplot.moc"
