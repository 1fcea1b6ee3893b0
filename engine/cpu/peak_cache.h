// The per-machine peak `train` divides by: measured once when the machine is quiet, then kept.
//
// Decision: the cache is one JSON file, $FLOTILLA_CACHE_DIR/cpu-peaks.json (else
// $XDG_CACHE_HOME/flotilla/, else ~/.cache/flotilla/), keyed by the cpuid brand string, family and
// model and the thread count; only trusted measurements (other load <= kQuietLoad, and an FMA
// ceiling not below its own sgemm) are written, and each figure kept is the highest so far (a
// ceiling cannot fall on the same CPU; a low reading is a core shared at the host). A loaded or
// contended measurement is used for the one run that took it (MFU capped at 1) and said so, never
// kept.
#pragma once

#include <optional>
#include <string>

#include "engine/cpu/peak.h"

namespace flotilla::cpu {

std::string peak_cache_path();
// "<brand> | family F model M | <threads> threads | method 3" (F, M: this machine's cpuid).
std::string peak_cache_key(const std::string& cpu_model, int threads);

std::optional<CpuPeak> load_cached_peak(const std::string& path, const std::string& cpu_model, int threads);
// Writes `peak` under its key when it is trusted, each figure the larger of it and the kept one;
// returns whether it did.
// An unwritable cache is not an error (returns false).
bool store_peak(const std::string& path, const CpuPeak& peak);

struct PeakForRun {
  CpuPeak peak;
  std::string source;  // "cache <path>", "measured now (kept in <path>)", or "measured under load ..."
};
// The cached figure for this CPU and thread count, else a fresh measurement (kept when quiet).
PeakForRun peak_for_run(int threads);

}  // namespace flotilla::cpu
