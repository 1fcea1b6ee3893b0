// The per-machine peak `train` divides by: measured once, then kept, so a run starts on it at once.
//
// Decision: the cache is one JSON file, $FLOTILLA_CACHE_DIR/cpu-peaks.json (else
// $XDG_CACHE_HOME/flotilla/, else ~/.cache/flotilla/), keyed by the cpuid brand string, family and
// model, the thread count and the kernel path measured (avx512, avx2, sse). Trusted measurements
// (other load <= kQuietLoad, and an FMA ceiling not below its own sgemm) are kept, each figure the
// highest so far (a ceiling cannot fall on the same CPU; a low reading is a core shared at the host).
//
// Issue 34 #7 (a start on a busy machine re-measured for 4-6 s, billed before step 1): a run never
// measures when a figure is kept. The rule:
//  - a trusted entry is used as it is;
//  - a reading that is not trusted (taken under load, or contended) is kept too, as a provisional
//    entry (the highest such reading; a trusted one replaces it), and the next starts use it, saying so;
//  - a start measures again only when there is no entry, when the entry is provisional and the
//    machine is quiet now (a 0.15 s look at /proc/stat: a trusted figure can replace it, once), or
//    when a run beat the kept figure (its MFU came out above 100%, which the trainer then reports as
//    n/a and marks here with mark_peak_beaten).
// MFU is never above 100% whatever the entry (mfu_ratio in peak.h).
#pragma once

#include <optional>
#include <string>

#include "engine/cpu/peak.h"

namespace flotilla::cpu {

std::string peak_cache_path();
// "<brand> | family F model M | <threads> threads | <path> | method 3" (F, M: this machine's
// cpuid; path: the widest fp32 kernel path, the one measured).
std::string peak_cache_key(const std::string& cpu_model, int threads);

std::optional<CpuPeak> load_cached_peak(const std::string& path, const std::string& cpu_model, int threads);
// Writes `peak` under its key when it is trusted, each figure the larger of it and the kept one;
// returns whether it did.
// An unwritable cache is not an error (returns false).
bool store_peak(const std::string& path, const CpuPeak& peak);

// The provisional entry (a reading taken under load or on contended cores), if any and not beaten.
std::optional<CpuPeak> load_provisional_peak(const std::string& path, const std::string& cpu_model,
                                             int threads);
// Keeps an untrusted reading as the provisional entry (the higher of it and the kept one); false
// when a trusted entry exists (it stays) or the file cannot be written.
bool store_provisional_peak(const std::string& path, const CpuPeak& peak);
// A run reached above the kept figure for this CPU and thread count: the next start measures again.
void mark_peak_beaten(const std::string& path, const std::string& cpu_model, int threads);

struct PeakForRun {
  CpuPeak peak;
  // "cache <path>", "kept from a measurement under load ...", "measured now, kept in <path>", or
  // "measured under load ... kept as provisional ..."
  std::string source;
  bool measured = false;  // this start measured (seconds of start-up); false: a kept figure
};
// The kept figure for this CPU, thread count and kernel path, else a fresh measurement (the rule above).
PeakForRun peak_for_run(int threads);

// The fp32 sgemm libraries timed against each other on this CPU (blas.h: the default is the one
// measured faster), kept beside the peaks (sgemm_cache_path: sgemm-choice.json in the same
// folder, a file of its own so the peak rules above stay as they are) under sgemm_choice_key, so
// every process of a run on this machine, and every later run, uses the same library (and so the
// same bits) without timing again.
struct SgemmMeasurement {
  double onednn_gflops = 0;  // one thread, the representative training shapes (blas.cpp)
  double openblas_gflops = 0;
  double other_load = 0;  // other processes' share of the CPUs meanwhile
};
// An exclusive lock on <path>.lock for a read-modify-write of the cache file (flock: released when
// destroyed, or if the process dies). Every writer below takes it, so two processes updating
// different entries at once both land; held() is false when the lock file cannot be created.
class CacheFileLock {
 public:
  explicit CacheFileLock(const std::string& cache_path);
  ~CacheFileLock();
  CacheFileLock(const CacheFileLock&) = delete;
  CacheFileLock& operator=(const CacheFileLock&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

// "sgemm | <brand> | family F model M | oneDNN <version> | OpenBLAS <core> | method 1": a new
// library version, or an OpenBLAS core chosen differently, is measured again.
std::string sgemm_choice_key(const std::string& onednn_version, const std::string& openblas_core);
std::string sgemm_cache_path();  // <the folder of peak_cache_path()>/sgemm-choice.json
std::optional<SgemmMeasurement> load_sgemm_measurement(const std::string& path, const std::string& key);
// Atomic (temporary file, then rename); false when the file cannot be written. The caller holds
// the CacheFileLock (it measured under it, so that concurrent starts measure once).
bool store_sgemm_measurement(const std::string& path, const std::string& key, const SgemmMeasurement& m);

}  // namespace flotilla::cpu
