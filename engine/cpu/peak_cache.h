// The per-machine peak `train` divides by: measured once when the machine is quiet, then kept.
//
// Decision: the cache is one JSON file, $FLOTILLA_CACHE_DIR/cpu-peaks.json (else
// $XDG_CACHE_HOME/flotilla/, else ~/.cache/flotilla/), keyed by the cpuid brand string and the
// thread count; only quiet measurements (other load <= kQuietLoad) are written. A loaded
// measurement is used for the one run that took it (MFU capped at 1) and said so, never kept.
#pragma once

#include <optional>
#include <string>

#include "engine/cpu/peak.h"

namespace flotilla::cpu {

std::string peak_cache_path();
// "<brand> | <threads> threads".
std::string peak_cache_key(const std::string& cpu_model, int threads);

std::optional<CpuPeak> load_cached_peak(const std::string& path, const std::string& cpu_model, int threads);
// Writes `peak` under its key (replacing an older entry) when it is quiet; returns whether it did.
// An unwritable cache is not an error (returns false).
bool store_peak(const std::string& path, const CpuPeak& peak);

struct PeakForRun {
  CpuPeak peak;
  std::string source;  // "cache <path>", "measured now (kept in <path>)", or "measured under load ..."
};
// The cached figure for this CPU and thread count, else a fresh measurement (kept when quiet).
PeakForRun peak_for_run(int threads);

}  // namespace flotilla::cpu
