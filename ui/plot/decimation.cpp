// Min/max decimation for drawing (see decimation.h).
#include "ui/plot/decimation.h"

#include <algorithm>
#include <cmath>

namespace flotilla::ui {

void decimateIndices(const double* x, const double* y, qsizetype n, double xLo, double xHi, int columns,
                     QVector<qsizetype>* out) {
  out->clear();
  if (n <= 0) return;
  columns = std::max(1, columns);
  // The visible slice [begin, end), widened by one point each side so the line reaches the edges.
  qsizetype begin = std::lower_bound(x, x + n, xLo) - x;
  qsizetype end = std::upper_bound(x, x + n, xHi) - x;
  if (begin > 0) --begin;
  if (end < n) ++end;
  if (begin >= end) return;
  if (end - begin <= 4 * static_cast<qsizetype>(columns)) {  // already few enough: draw them all
    out->reserve(end - begin);
    for (qsizetype i = begin; i < end; ++i) out->append(i);
    return;
  }
  out->reserve(4 * columns + 2);
  const double span = xHi > xLo ? xHi - xLo : 1.0;
  const double scale = columns / span;
  auto emit4 = [out](qsizetype first, qsizetype lo, qsizetype hi, qsizetype last) {
    qsizetype picks[4] = {first, lo < 0 ? first : lo, hi < 0 ? first : hi, last};
    std::sort(picks, picks + 4);
    for (qsizetype p : picks)
      if (out->isEmpty() || out->back() != p) out->append(p);
  };
  qsizetype i = begin;
  while (i < end) {
    // The column of the group's first point, and the x where the next column starts. Points
    // outside [xLo, xHi] (the edge neighbours) form groups of their own.
    const double c = std::floor((x[i] - xLo) * scale);
    const double bound = c < 0 ? xLo : c >= columns ? HUGE_VAL : xLo + (c + 1) / scale;
    const qsizetype first = i;
    qsizetype lo = -1, hi = -1;
    double loV = 0, hiV = 0;
    do {
      const double v = y[i];
      if (std::isfinite(v)) {
        if (lo < 0 || v < loV) lo = i, loV = v;
        if (hi < 0 || v > hiV) hi = i, hiV = v;
      }
      ++i;
    } while (i < end && x[i] < bound);
    emit4(first, lo, hi, i - 1);
  }
}

}  // namespace flotilla::ui
