// Loss smoothing (ui/plot/smoothing): TensorBoard's debiased EMA, checked against hand-computed
// values and against the reference formula evaluated independently in long double.
#include <QtTest>

#include <cmath>
#include <limits>

#include "ui/plot/smoothing.h"

using flotilla::ui::debiasedEma;
using flotilla::ui::EmaSmoother;

namespace {

// The reference: s_t = w*s_{t-1} + (1-w)*x_t, s_0 = 0, reported as s_t / (1 - w^t), written out
// term by term (a sum of weighted values), not as a recurrence, in long double.
QVector<double> reference(const QVector<double>& x, long double w) {
  QVector<double> out;
  for (int t = 1; t <= x.size(); ++t) {
    long double s = 0;
    for (int i = 1; i <= t; ++i) s += (1 - w) * std::pow(w, static_cast<long double>(t - i)) * x[i - 1];
    out.append(static_cast<double>(s / (1 - std::pow(w, static_cast<long double>(t)))));
  }
  return out;
}

}  // namespace

class TestSmoothing : public QObject {
  Q_OBJECT

 private slots:
  void handComputedValues();
  void matchesTheReferenceOnKnownData();
  void weightZeroIsTheRawSeries();
  void debiasingKeepsAConstantSeriesConstant();
  void nonFiniteValuesPassThroughWithoutAdvancing();
  void incrementalEqualsBatch();
};

void TestSmoothing::handComputedValues() {
  // w = 0.6, x = 1, 2, 3:
  //   s1 = 0.4                 / (1 - 0.6)   = 1
  //   s2 = 0.24 + 0.8 = 1.04   / (1 - 0.36)  = 1.625
  //   s3 = 0.624 + 1.2 = 1.824 / (1 - 0.216) = 2.3265306122448979...
  const QVector<double> s = debiasedEma({1, 2, 3}, 0.6);
  QCOMPARE(s.size(), 3);
  QVERIFY(std::abs(s[0] - 1.0) < 1e-15);
  QVERIFY(std::abs(s[1] - 1.625) < 1e-15);
  QVERIFY(std::abs(s[2] - 1.824 / 0.784) < 1e-15);
}

void TestSmoothing::matchesTheReferenceOnKnownData() {
  // A loss-like curve: exponential decay with deterministic noise and one spike.
  QVector<double> x;
  for (int i = 0; i < 300; ++i)
    x.append(1.0 + 5.0 * std::exp(-i / 40.0) + 0.3 * std::sin(i * 1.7) + (i == 150 ? 4.0 : 0.0));
  for (double w : {0.0, 0.3, 0.6, 0.9, 0.99}) {
    const QVector<double> got = debiasedEma(x, w);
    const QVector<double> want = reference(x, w);
    for (int i = 0; i < x.size(); ++i)
      QVERIFY2(std::abs(got[i] - want[i]) <= 1e-12 * std::abs(want[i]),
               qPrintable(QStringLiteral("w=%1 i=%2: %3 vs %4")
                              .arg(w)
                              .arg(i)
                              .arg(got[i], 0, 'g', 17)
                              .arg(want[i], 0, 'g', 17)));
  }
  // Smoothing must damp the spike: at w = 0.6 the smoothed jump is 40% of the raw one.
  const QVector<double> s = debiasedEma(x, 0.6);
  QVERIFY(s[150] - s[149] < 0.5 * (x[150] - x[149]));
}

void TestSmoothing::weightZeroIsTheRawSeries() {
  const QVector<double> x = {5, 4, 4.5, 3, 2.25};
  QCOMPARE(debiasedEma(x, 0.0), x);
}

void TestSmoothing::debiasingKeepsAConstantSeriesConstant() {
  // Without the 1/(1 - w^t) factor the first points would be pulled towards zero (0.4 * 7 = 2.8).
  const QVector<double> s = debiasedEma(QVector<double>(20, 7.0), 0.6);
  for (double v : s) QVERIFY2(std::abs(v - 7.0) < 1e-12, qPrintable(QString::number(v, 'g', 17)));
}

void TestSmoothing::nonFiniteValuesPassThroughWithoutAdvancing() {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const QVector<double> s = debiasedEma({1, nan, 2, 3}, 0.6);
  const QVector<double> clean = debiasedEma({1, 2, 3}, 0.6);
  QVERIFY(std::isnan(s[1]));
  QCOMPARE(s[0], clean[0]);
  QCOMPARE(s[2], clean[1]);  // the NaN neither moved the average nor counted as a step
  QCOMPARE(s[3], clean[2]);
}

void TestSmoothing::incrementalEqualsBatch() {
  QVector<double> x;
  for (int i = 0; i < 1000; ++i) x.append(std::cos(i * 0.37) + i * 0.001);
  const QVector<double> batch = debiasedEma(x, 0.8);
  EmaSmoother ema(0.8);
  for (int i = 0; i < x.size(); ++i) QCOMPARE(ema.push(x[i]), batch[i]);
  ema.reset();
  QCOMPARE(ema.push(x[0]), batch[0]);
}

QTEST_GUILESS_MAIN(TestSmoothing)
#include "test_smoothing.moc"
