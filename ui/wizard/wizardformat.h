// Numbers as the wizard writes them: counts with a unit suffix, durations and money.
#pragma once

#include <QString>

namespace flotilla::ui {

QString formatCount(double n);           // 3.42 M, 124 M, 1.56 B, 980 k
QString formatDuration(double seconds);  // "42 s", "12 min 5 s", "3 h 20 min", "2 d 4 h"
QString formatUsd(double usd);           // "$0.00", "$12.40", "$1,234"

}  // namespace flotilla::ui
