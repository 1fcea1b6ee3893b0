// The CPU's physical ceilings for MFU: register-only FMA throughput (fp32) and bf16 dot-product
// throughput, measured with the same threads as training, plus the rules MFU follows.
//
// Decision: the ceiling is a loop of independent FMAs on registers (no loads, no stores), at the
// widest width the CPU has, timed by each thread's own CPU time (so it is what `threads` cores do,
// not what the scheduler left us), not the library's sgemm: an sgemm on a narrow kernel would make a slow
// machine look efficient (MFU 88% at a sixth of the machine's speed, issue 17). A measurement taken
// while other processes used more than kQuietLoad of the CPUs is reported but never kept as a peak,
// and MFU is capped at 1 (a figure above it means the ceiling was measured low).
//
// A virtual machine's cores can be shared at the host (another guest on the sibling hyperthread):
// the loop then runs at half speed for a while and this OS sees no other load and no steal. Seen
// on a 2-vCPU AMD EPYC (Zen 4): 1 in 8 readings of 0.25 s on 2 threads gave 120 instead of 229
// GFLOP/s, below the sgemm measured next (185). So each thread's best repetition counts (not the
// best sum), a ceiling below the sgemm of the same measurement is remeasured and, if still below,
// marked `contended` and never kept, and the kept figure is the highest trusted reading
// (peak_cache.h).
#pragma once

#include <string>

#include "engine/cpu/cpu_features.h"

namespace flotilla::cpu {

inline constexpr double kQuietLoad = 0.10;  // other processes' CPU share above which a peak is "loaded"

struct CpuPeak {
  std::string cpu_model;  // cpuid brand string
  int threads = 0;
  std::string fp32_isa;        // the FMA width measured: "avx512", "avx2" or "sse"
  double fp32_fma_gflops = 0;  // register-only FMA peak, all threads
  std::string bf16_isa;        // "avx512_bf16" or "" (none)
  double bf16_dot_gflops = 0;  // vdpbf16ps peak (AMX is not measured: no AMX kernel is used), 0 if none
  double sgemm_gflops = 0;     // library sgemm through the engine's gemm (0 when not measured)
  double other_load = 0;       // other processes' CPU share during the measurement
  bool contended = false;      // the FMA ceiling read below the sgemm it bounds: cores shared at the host
  bool quiet() const { return other_load <= kQuietLoad; }
  // Good enough to keep as the machine's peak: quiet, and not contradicted by its own sgemm.
  bool trusted() const { return quiet() && !contended; }
};

// Register-only fp32 FMA GFLOP/s at `isa`'s width (kAvx512, kAvx2; kSse measures SSE mul+add) on
// `threads` threads: best of repetitions over about `seconds`.
double fma_peak_gflops(KernelPath isa, int threads, double seconds);
// AVX512_BF16 dot-product GFLOP/s (2 FLOP per bf16 pair); 0 when the CPU lacks AVX512_BF16.
double bf16_dot_peak_gflops(int threads, double seconds);

// Measures both ceilings (and the sgemm when `with_sgemm`) at this CPU's widest paths. With the
// sgemm, an FMA ceiling below it is measured again (twice, longer) and marked `contended` if it
// stays below.
CpuPeak measure_cpu_peak(int threads, double seconds_each, bool with_sgemm);

// The ceiling MFU divides by, in FLOP/s, for a dtype ("fp32" or "bf16"); 0 when there is none
// (bf16 on a CPU without bf16 instructions).
double ceiling_flops(const CpuPeak& peak, const std::string& dtype);

// MFU = model FLOP/s / ceiling; 0 when the ceiling is unknown (<= 0). Above 1 the ceiling itself is
// wrong (measured while other work shared the cores), so there is no MFU to report: NaN, which the
// metrics write as null and the text as "n/a", never a capped 100%.
double mfu_ratio(double model_flops_per_s, double ceiling_flops_per_s);

}  // namespace flotilla::cpu
