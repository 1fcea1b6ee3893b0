// Debiased EMA (see smoothing.h).
#include "ui/plot/smoothing.h"

#include <cmath>

namespace flotilla::ui {

double EmaSmoother::push(double x) {
  if (!std::isfinite(x)) return x;
  m_last = m_last * m_weight + (1.0 - m_weight) * x;
  ++m_count;
  // w^t underflows to 0 for long series, where the debias factor is 1 anyway.
  m_weightPow *= m_weight;
  const double debias = m_weight == 1.0 ? 1.0 : 1.0 - m_weightPow;
  return m_last / debias;
}

QVector<double> debiasedEma(const QVector<double>& values, double weight) {
  EmaSmoother ema(weight);
  QVector<double> out;
  out.reserve(values.size());
  for (double v : values) out.append(ema.push(v));
  return out;
}

}  // namespace flotilla::ui
