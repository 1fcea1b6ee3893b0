// Figure formats (see figures.h).
#include "runs/figures.h"

#include <cmath>
#include <cstdio>

namespace flotilla::runs {
namespace {

// Two decimals from 1 up, four below, two significant digits under 0.0001 (never "0.0000").
std::string amount(double v) {
  char buf[48];
  const double a = std::fabs(v);
  if (a >= 1 || a == 0)
    std::snprintf(buf, sizeof buf, "%.2f", v);
  else if (a >= 0.0001)
    std::snprintf(buf, sizeof buf, "%.4f", v);
  else
    std::snprintf(buf, sizeof buf, "%.*f", 1 - static_cast<int>(std::floor(std::log10(a))), v);
  return buf;
}

}  // namespace

std::string usd_number(double usd) { return amount(usd); }

std::string usd_text(std::optional<double> usd) {
  if (!usd) return "unpriced";
  if (*usd < 0) return "-$" + amount(-*usd);  // "-$0.0033", never "$-0.0033"
  std::string s = "$";
  s += amount(*usd);
  return s;
}

std::string clock_text(double seconds) {
  const long long s = seconds > 0 ? static_cast<long long>(seconds) : 0;
  char buf[40];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, (s / 60) % 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lld:%02lld", s / 60, s % 60);
  return buf;
}

std::string device_hours_text(double hours, const std::string& unit) { return amount(hours) + " " + unit; }

std::string mfu_text(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", fraction * 100);
  return buf;
}

}  // namespace flotilla::runs
