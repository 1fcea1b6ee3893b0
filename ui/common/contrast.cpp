// Contrast arithmetic (see contrast.h).
#include "ui/common/contrast.h"

#include <algorithm>
#include <cmath>

namespace flotilla::ui {
namespace {
double channel(double c) { return c <= 0.04045 ? c / 12.92 : std::pow((c + 0.055) / 1.055, 2.4); }
}  // namespace

double relativeLuminance(const QColor& c) {
  return 0.2126 * channel(c.redF()) + 0.7152 * channel(c.greenF()) + 0.0722 * channel(c.blueF());
}

double contrastRatio(const QColor& a, const QColor& b) {
  const double la = relativeLuminance(a), lb = relativeLuminance(b);
  return (std::max(la, lb) + 0.05) / (std::min(la, lb) + 0.05);
}

QColor blend(const QColor& a, const QColor& b, double t) {
  const auto mix = [t](double x, double y) { return x * t + y * (1 - t); };
  return QColor::fromRgbF(static_cast<float>(mix(a.redF(), b.redF())),
                          static_cast<float>(mix(a.greenF(), b.greenF())),
                          static_cast<float>(mix(a.blueF(), b.blueF())));
}

QColor towardsContrast(const QColor& from, const QColor& to, std::initializer_list<QColor> against,
                       double ratio) {
  for (int step = 0; step <= 50; ++step) {
    const QColor c = blend(to, from, step / 50.0);
    bool enough = true;
    for (const QColor& other : against) enough = enough && contrastRatio(c, other) >= ratio;
    if (enough) return c;
  }
  return to;
}

}  // namespace flotilla::ui
