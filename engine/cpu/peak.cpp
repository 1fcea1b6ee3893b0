// Register-only FMA and bf16 dot-product loops (see peak.h). Each thread keeps 16 independent
// accumulators: enough to cover FMA latency (4-5 cycles) on two pipes on every x86 core so far, and
// few enough to stay in registers (16 of 32 zmm, 16 of 16 ymm with the constants in memory operands).
#include "engine/cpu/peak.h"

#include <omp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <vector>

#include "engine/core/cpu_load.h"
#include "engine/cpu/matmul.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace flotilla::cpu {
namespace {

constexpr int kAcc = 16;  // AVX-512: 32 zmm registers hold 16 chains plus the operands
// AVX2 and SSE have 16 registers: 16 chains plus x and y spilled to the stack every iteration and
// measured the ceiling at 2/3 of what the library's sgemm reached (AMD EPYC, AVX2: 52 against 63
// GFLOP/s). 12 chains still cover FMA latency x ports (4-5 cycles x 2) and stay in registers.
constexpr int kAccNarrow = 12;

#if defined(__x86_64__)
__attribute__((target("avx512f"))) float fma_loop_avx512(long iters) {
  __m512 acc[kAcc];
  for (int k = 0; k < kAcc; ++k) acc[k] = _mm512_set1_ps(0.001f * static_cast<float>(k));
  const __m512 x = _mm512_set1_ps(0.9999999f), y = _mm512_set1_ps(1e-7f);
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int k = 0; k < kAcc; ++k) acc[k] = _mm512_fmadd_ps(acc[k], x, y);
  }
  __m512 s = acc[0];
  for (int k = 1; k < kAcc; ++k) s = _mm512_add_ps(s, acc[k]);
  // Stored and summed by hand: GCC 12's _mm512_reduce_add_ps trips its own -Wuninitialized.
  alignas(64) float out[16];
  _mm512_store_ps(out, s);
  return out[0] + out[15];
}

__attribute__((target("avx2,fma"))) float fma_loop_avx2(long iters) {
  __m256 acc[kAccNarrow];
  for (int k = 0; k < kAccNarrow; ++k) acc[k] = _mm256_set1_ps(0.001f * static_cast<float>(k));
  const __m256 x = _mm256_set1_ps(0.9999999f), y = _mm256_set1_ps(1e-7f);
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int k = 0; k < kAccNarrow; ++k) acc[k] = _mm256_fmadd_ps(acc[k], x, y);
  }
  __m256 s = acc[0];
  for (int k = 1; k < kAccNarrow; ++k) s = _mm256_add_ps(s, acc[k]);
  alignas(32) float out[8];
  _mm256_store_ps(out, s);
  return out[0] + out[7];
}

// SSE has no FMA: one mul and one add per lane (2 FLOP), the same count as an FMA.
float fma_loop_sse(long iters) {
  __m128 acc[kAccNarrow];
  for (int k = 0; k < kAccNarrow; ++k) acc[k] = _mm_set1_ps(0.001f * static_cast<float>(k));
  const __m128 x = _mm_set1_ps(0.9999999f), y = _mm_set1_ps(1e-7f);
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 12
    for (int k = 0; k < kAccNarrow; ++k) acc[k] = _mm_add_ps(_mm_mul_ps(acc[k], x), y);
  }
  __m128 s = acc[0];
  for (int k = 1; k < kAccNarrow; ++k) s = _mm_add_ps(s, acc[k]);
  return _mm_cvtss_f32(s);
}

__attribute__((target("avx512f,avx512bf16"))) float bf16_loop(long iters) {
  __m512 acc[kAcc];
  for (int k = 0; k < kAcc; ++k) acc[k] = _mm512_setzero_ps();
  // 2^-10 in bf16 (0x3a80): products of 2^-20 keep the sums far from overflow for any run length.
  const __m512bh a = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3a80));
  const __m512bh b = reinterpret_cast<__m512bh>(_mm512_set1_epi16(0x3a81));
  for (long i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int k = 0; k < kAcc; ++k) acc[k] = _mm512_dpbf16_ps(acc[k], a, b);
  }
  __m512 s = acc[0];
  for (int k = 1; k < kAcc; ++k) s = _mm512_add_ps(s, acc[k]);
  // Stored and summed by hand: GCC 12's _mm512_reduce_add_ps trips its own -Wuninitialized.
  alignas(64) float out[16];
  _mm512_store_ps(out, s);
  return out[0] + out[15];
}
#endif

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Aggregate GFLOP/s of `loop` on `threads` threads; `flops_per_iter` per thread per iteration.
// Each thread's rate is its FLOPs over its own CPU time (CLOCK_THREAD_CPUTIME_ID), so time sliced
// away to other processes does not lower it (the load is still measured and reported by the
// caller). The ceiling is the sum of each thread's best repetition, not the best sum: a core shared
// at the host slows one thread for a while, and the other threads' good repetitions need not fall
// in the same one (peak.h). The repetition length is found on the calling thread (about 30 ms).
template <class Loop>
double best_rate(Loop loop, double flops_per_iter, int threads, double seconds) {
  using Clock = std::chrono::steady_clock;
  threads = std::max(1, threads);
  std::vector<float> sink(static_cast<size_t>(threads) * 16);
  std::vector<double> rate(static_cast<size_t>(threads) * 8);
  long iters = 1 << 12;
  while (iters < (1L << 30)) {
    const double t0 = thread_cpu_seconds();
    sink[0] += loop(iters);
    if (thread_cpu_seconds() - t0 >= 0.03) break;
    iters *= 2;
  }
  const double flops = flops_per_iter * static_cast<double>(iters);
  std::vector<double> best(static_cast<size_t>(threads), 0.0);
  int reps = 0;
  const auto start = Clock::now();
  while (reps < 3 || std::chrono::duration<double>(Clock::now() - start).count() < seconds) {
#pragma omp parallel num_threads(threads)
    {
      const size_t t = static_cast<size_t>(omp_get_thread_num());
      const double c0 = thread_cpu_seconds();
      sink[t * 16] += loop(iters);
      rate[t * 8] = flops / std::max(1e-9, thread_cpu_seconds() - c0) / 1e9;
    }
    for (int t = 0; t < threads; ++t)
      best[static_cast<size_t>(t)] = std::max(best[static_cast<size_t>(t)], rate[static_cast<size_t>(t) * 8]);
    ++reps;
  }
  volatile float keep = sink[0];
  (void)keep;
  double sum = 0;
  for (double b : best) sum += b;
  return sum;
}

}  // namespace

// FLOTILLA_TEST_FMA_SCALE (tests only, 0 < s <= 1) scales the FMA reading: it stands in for a host
// sharing the cores with another guest, which no test can arrange for real.
static double fma_scale() {
  static const double s = [] {
    const char* v = std::getenv("FLOTILLA_TEST_FMA_SCALE");
    const double x = v != nullptr ? std::atof(v) : 1.0;
    return x > 0 && x <= 1 ? x : 1.0;
  }();
  return s;
}

double fma_peak_gflops(KernelPath isa, int threads, double seconds) {
#if defined(__x86_64__)
  const double s = fma_scale();
  if (isa >= KernelPath::kAvx512) return s * best_rate(fma_loop_avx512, kAcc * 16 * 2.0, threads, seconds);
  if (isa == KernelPath::kAvx2) return s * best_rate(fma_loop_avx2, kAccNarrow * 8 * 2.0, threads, seconds);
  return s * best_rate(fma_loop_sse, kAccNarrow * 4 * 2.0, threads, seconds);
#else
  (void)isa, (void)threads, (void)seconds;
  return 0;
#endif
}

double bf16_dot_peak_gflops(int threads, double seconds) {
#if defined(__x86_64__)
  if (choose_kernel_path(cpu_features()).bf16 == KernelPath::kSse) return 0;
  return best_rate(bf16_loop, kAcc * 16 * 2 * 2.0, threads, seconds);
#else
  (void)threads, (void)seconds;
  return 0;
#endif
}

CpuPeak measure_cpu_peak(int threads, double seconds_each, bool with_sgemm) {
  const KernelChoice c = choose_kernel_path(cpu_features());  // the CPU's own width, not a capped one
  CpuPeak p;
  p.cpu_model = cpu_features().brand;
  p.threads = std::max(1, threads);
  const LoadWindow load;
  p.fp32_isa = kernel_path_name(c.fp32);
  p.fp32_fma_gflops = fma_peak_gflops(c.fp32, p.threads, seconds_each);
  if (c.bf16 != KernelPath::kSse) {
    p.bf16_isa = kernel_path_name(KernelPath::kAvx512Bf16);
    p.bf16_dot_gflops = bf16_dot_peak_gflops(p.threads, seconds_each);
  }
  if (with_sgemm) {
    p.sgemm_gflops = sgemm_peak_gflops(2048, 3, p.threads);
    // No sgemm outruns the FMAs it is made of: a ceiling below it was measured on shared cores.
    for (int again = 1; again <= 2 && p.fp32_fma_gflops < p.sgemm_gflops; ++again)
      p.fp32_fma_gflops =
          std::max(p.fp32_fma_gflops, fma_peak_gflops(c.fp32, p.threads, seconds_each * (1 + again)));
    p.contended = p.fp32_fma_gflops < p.sgemm_gflops;
  }
  p.other_load = load.other_load();
  return p;
}

double ceiling_flops(const CpuPeak& peak, const std::string& dtype) {
  return (dtype == "bf16" ? peak.bf16_dot_gflops : peak.fp32_fma_gflops) * 1e9;
}

double mfu_ratio(double model_flops_per_s, double ceiling_flops_per_s) {
  if (!(ceiling_flops_per_s > 0) || !(model_flops_per_s > 0)) return 0.0;
  const double ratio = model_flops_per_s / ceiling_flops_per_s;
  return ratio <= 1.0 ? ratio : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace flotilla::cpu
