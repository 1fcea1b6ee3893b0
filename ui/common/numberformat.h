// Numbers as the app shows a loss (or any metric with no unit): enough significant digits that a
// tiny value is not "0.0000".
//
// Decision: values from 0.1 up keep the fixed four decimals users compare runs by ("3.9650");
// below that the digits follow the value's magnitude (four significant: "0.001234"), and below
// 1e-4 it is written in scientific form ("3.200e-05"), so every value shows four significant
// digits and none reads as zero.
#pragma once

#include <QString>

namespace flotilla::ui {

// "3.9650", "0.01234", "3.200e-05", "0"; "" for NaN.
QString formatMetric(double value);

}  // namespace flotilla::ui
