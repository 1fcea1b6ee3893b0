// A/B timing for the kernel microbenchmarks (bench-nf4, bench-attention): two variants run
// alternately, best of each. Non-obvious decision: alternating keeps another process's load from
// favouring either variant, and the best process CPU time is reported beside the best wall time,
// because on a shared machine a preempted thread's wait is not CPU time (OpenMP's spinning threads
// count in both variants alike), so the CPU-time ratio is the steadier comparison.
#pragma once

#include <time.h>

#include <algorithm>
#include <chrono>
#include <functional>

namespace flotilla::cli {

inline double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Best wall seconds (a, b) and best process CPU seconds (cpu_a, cpu_b).
struct Best {
  double a = 1e30, b = 1e30, cpu_a = 1e30, cpu_b = 1e30;
};

// Runs a and b once each to warm up (page faults, oneDNN primitives, tile buffers), then `reps`
// alternating rounds.
inline Best best_seconds(int reps, const std::function<void()>& a, const std::function<void()>& b) {
  a();
  b();
  Best best;
  for (int r = 0; r < reps; ++r)
    for (int which = 0; which < 2; ++which) {
      const double c0 = process_cpu_seconds();
      const auto t0 = std::chrono::steady_clock::now();
      (which == 0 ? a : b)();
      const double w = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                   c = process_cpu_seconds() - c0;
      double& bw = which == 0 ? best.a : best.b;
      double& bc = which == 0 ? best.cpu_a : best.cpu_b;
      bw = std::min(bw, w);
      bc = std::min(bc, c);
    }
  return best;
}

}  // namespace flotilla::cli
