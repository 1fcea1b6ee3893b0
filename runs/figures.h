// How a run's money, durations, device-hours and MFU are written, the same in the app and in
// `flotilla`: one format per kind of figure, so a number reads the same on every page and command.
//
// Decision: money keeps two decimals from $1 up ("$12.35") and four below ("$0.1733", "$0.0053"),
// so a small budget's sums never round to $0.00 or $0.01; a sum under $0.0001 keeps two significant
// digits ("$0.000012"). An unpriced figure is written "unpriced", never $0.00 (callers pass nullopt).
// Durations are h:mm:ss clocks ("0:17", "2:19", "1:02:03"), the Runs and Live pages' format. The
// meanings (running time, training time, device-hours) are defined on db::RunSummary (db/queries.h).
#pragma once

#include <optional>
#include <string>

namespace flotilla::runs {

// "$0.1733", "$12.35", "$0.000012", "$0.00"; "unpriced" for nullopt.
std::string usd_text(std::optional<double> usd);
// The number part of usd_text ("0.1733"), for a caller that writes its own currency sign.
std::string usd_number(double usd);
// "0:17", "2:19", "1:02:03" (negative: "0:00").
std::string clock_text(double seconds);
// Device-hours with the same digits as money: "0.0050 CPU-h", "12.35 GPU-h".
std::string device_hours_text(double hours, const std::string& unit);
// MFU as a percentage with one decimal: 0.0604 -> "6.0%".
std::string mfu_text(double fraction);

}  // namespace flotilla::runs
