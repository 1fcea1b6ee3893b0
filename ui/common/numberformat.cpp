// Metric values with significant digits (see numberformat.h).
#include "ui/common/numberformat.h"

#include <cmath>

namespace flotilla::ui {

QString formatMetric(double value) {
  if (std::isnan(value)) return {};
  if (value == 0) return QStringLiteral("0");
  if (!std::isfinite(value)) return value > 0 ? QStringLiteral("inf") : QStringLiteral("-inf");
  const double magnitude = std::fabs(value);
  if (magnitude >= 0.1) return QString::number(value, 'f', 4);
  if (magnitude >= 1e-4) {
    const int decimals = 3 - static_cast<int>(std::floor(std::log10(magnitude)));  // 4 significant
    return QString::number(value, 'f', decimals);
  }
  return QString::number(value, 'e', 3);
}

}  // namespace flotilla::ui
