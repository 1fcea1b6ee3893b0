// Decimation for drawing (ui/plot/decimation): a single spike in a million points survives, every
// pixel column keeps exactly its minimum and maximum (checked against brute force on random
// data), the result is a few points per column, and only the visible range (plus one neighbour
// each side) is drawn. Through the loss plot adapter: QCustomPlot receives the decimated points,
// spike included.
#include <QRandomGenerator>
#include <QtTest>

#include <cmath>
#include <limits>

#include "ui/plot/decimation.h"
#include "ui/plot/lossplot.h"
#include "ui/plot/seriesstore.h"

using flotilla::ui::decimateIndices;

class TestPlotDecimation : public QObject {
  Q_OBJECT

 private slots:
  void aSingleSpikeInAMillionPointsSurvives();
  void everyColumnKeepsItsMinimumAndMaximum();
  void onlyTheVisibleRangeIsDrawn();
  void shortSeriesAreDrawnWhole();
  void nanValuesNeverHideAColumn();
  void theLossPlotDrawsTheSpike();
};

void TestPlotDecimation::aSingleSpikeInAMillionPointsSurvives() {
  const qsizetype n = 1'000'000;
  QVector<double> x(n), y(n);
  for (qsizetype i = 0; i < n; ++i) {
    x[i] = static_cast<double>(i + 1);
    y[i] = 3.0 + 0.01 * std::sin(static_cast<double>(i) * 0.37);
  }
  y[543'210] = 100.0;  // one spike up
  y[765'432] = -50.0;  // one down
  QVector<qsizetype> picks;
  decimateIndices(x.constData(), y.constData(), n, 0, static_cast<double>(n), 1000, &picks);
  QVERIFY2(picks.size() <= 4 * 1000 + 2, qPrintable(QString::number(picks.size())));
  QVERIFY(picks.size() >= 1000);
  QVERIFY(picks.contains(543'210));
  QVERIFY(picks.contains(765'432));
  QCOMPARE(picks.front(), 0);
  QCOMPARE(picks.back(), n - 1);
  for (qsizetype i = 1; i < picks.size(); ++i) QVERIFY(picks[i - 1] < picks[i]);
}

void TestPlotDecimation::everyColumnKeepsItsMinimumAndMaximum() {
  const qsizetype n = 100'000;
  const int columns = 333;
  QRandomGenerator rng(42);
  QVector<double> x(n), y(n);
  double t = 0;
  for (qsizetype i = 0; i < n; ++i) {
    t += 0.5 + rng.generateDouble();  // uneven spacing
    x[i] = t;
    y[i] = rng.generateDouble() * 10 - 5;
  }
  const double lo = x.front(), hi = x.back();
  QVector<qsizetype> picks;
  decimateIndices(x.constData(), y.constData(), n, lo, hi, columns, &picks);
  // Brute force: each column's min and max over all points, then over the picked points.
  const double scale = columns / (hi - lo);
  auto column = [&](double v) { return std::min<int>(columns, static_cast<int>(std::floor((v - lo) * scale))); };
  QVector<double> allMin(columns + 1, 1e300), allMax(columns + 1, -1e300);
  QVector<double> pickMin(columns + 1, 1e300), pickMax(columns + 1, -1e300);
  for (qsizetype i = 0; i < n; ++i) {
    const int c = column(x[i]);
    allMin[c] = std::min(allMin[c], y[i]);
    allMax[c] = std::max(allMax[c], y[i]);
  }
  for (qsizetype i : picks) {
    const int c = column(x[i]);
    pickMin[c] = std::min(pickMin[c], y[i]);
    pickMax[c] = std::max(pickMax[c], y[i]);
  }
  for (int c = 0; c <= columns; ++c) {
    QCOMPARE(pickMin[c], allMin[c]);
    QCOMPARE(pickMax[c], allMax[c]);
  }
  QVERIFY(picks.size() <= 4 * (columns + 1));
}

void TestPlotDecimation::onlyTheVisibleRangeIsDrawn() {
  const qsizetype n = 100'000;
  QVector<double> x(n), y(n);
  for (qsizetype i = 0; i < n; ++i) {
    x[i] = static_cast<double>(i);
    y[i] = static_cast<double>(i % 7);
  }
  QVector<qsizetype> picks;
  decimateIndices(x.constData(), y.constData(), n, 10'000, 20'000, 100, &picks);
  QCOMPARE(picks.front(), 9'999);  // the neighbour left of the range, so the line reaches the edge
  QCOMPARE(picks.back(), 20'001);  // and right of it
  QVERIFY(picks.size() <= 4 * 101 + 2);
}

void TestPlotDecimation::shortSeriesAreDrawnWhole() {
  const QVector<double> x = {1, 2, 3, 4, 5}, y = {5, 4, 3, 2, 1};
  QVector<qsizetype> picks;
  decimateIndices(x.constData(), y.constData(), x.size(), 0, 10, 800, &picks);
  QCOMPARE(picks, (QVector<qsizetype>{0, 1, 2, 3, 4}));
  decimateIndices(x.constData(), y.constData(), 0, 0, 10, 800, &picks);
  QVERIFY(picks.isEmpty());
}

void TestPlotDecimation::nanValuesNeverHideAColumn() {
  const qsizetype n = 10'000;
  QVector<double> x(n), y(n);
  for (qsizetype i = 0; i < n; ++i) {
    x[i] = static_cast<double>(i);
    y[i] = i % 3 == 0 ? std::numeric_limits<double>::quiet_NaN() : 1.0;
  }
  y[5001] = 9.0;
  QVector<qsizetype> picks;
  decimateIndices(x.constData(), y.constData(), n, 0, n, 10, &picks);
  QVERIFY(picks.contains(5001));
  QVERIFY(picks.size() <= 4 * 10 + 2);
}

void TestPlotDecimation::theLossPlotDrawsTheSpike() {
  flotilla::ui::SeriesStore store;
  flotilla::ui::LossPlot plot;
  plot.resize(1000, 500);
  plot.show();
  QVERIFY(QTest::qWaitForWindowExposed(&plot));
  plot.setSource(&store, QStringLiteral("loss"), QStringLiteral("val_loss"));
  for (int step = 1; step <= 1'000'000; ++step)
    store.append(QStringLiteral("loss"), step, step == 654'321 ? 42.0 : 2.0 + 1.0 / step);
  QVERIFY(plot.refresh());
  QCOMPARE(plot.drawnRawMaximum(), 42.0);
  QVERIFY2(plot.drawnPointCount() < 5000, qPrintable(QString::number(plot.drawnPointCount())));
  QCOMPARE(plot.smoothedValues().size(), 1'000'000);
}

QTEST_MAIN(TestPlotDecimation)
#include "test_plotdecimation.moc"
