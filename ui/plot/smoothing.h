// Loss smoothing for plots, computed on the raw values (never on decimated or drawn points).
//
// Decision: TensorBoard's debiased exponential moving average, so the curve reads the way ML
// engineers are used to: s_t = w*s_{t-1} + (1-w)*x_t with s_0 = 0, shown as s_t / (1 - w^t),
// where t counts the finite values seen so far. The debiasing removes the pull towards zero that a
// zero-started EMA has on its first points. Non-finite values (a NaN loss) pass through unsmoothed
// and do not advance t, as in TensorBoard.
#pragma once

#include <QVector>

namespace flotilla::ui {

// Incremental form: push() values in order and get each smoothed value back. The smoothed prefix
// of a series never changes when points are appended, so a live plot smooths only new points.
class EmaSmoother {
 public:
  explicit EmaSmoother(double weight = 0.6) : m_weight(weight) {}
  double push(double x);
  double weight() const { return m_weight; }
  void reset() {
    m_last = 0;
    m_count = 0;
    m_weightPow = 1;
  }

 private:
  double m_weight;
  double m_last = 0;
  long long m_count = 0;
  double m_weightPow = 1;  // w^t, kept as a running product: one multiply per point, no pow()
};

// The whole series at once; weight in [0, 1): 0 = no smoothing.
QVector<double> debiasedEma(const QVector<double>& values, double weight);

}  // namespace flotilla::ui
