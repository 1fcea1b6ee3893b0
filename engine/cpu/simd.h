// SIMD dispatch and vectorisable math for the CPU kernels.
//
// One non-obvious decision: the build is portable (no -march=native), so every hot kernel is
// compiled three times with GCC's target_clones (x86-64-v4 = AVX-512, x86-64-v3 = AVX2+FMA, and the
// baseline) and the loader picks one per process with cpuid (an ifunc). The kernels are plain loops
// the compiler vectorises; OpenMP regions inside a cloned function are cloned with it. exp and tanh
// are our own branch-free polynomials (Cephes-style range reduction), because libm's scalar calls
// block vectorisation without -ffast-math; they are accurate to about 2 ulp.
#pragma once

#include <bit>
#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(FLOTILLA_NO_CLONES)
#define FLOTILLA_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define FLOTILLA_SIMD_CLONES
#endif

namespace flotilla::cpu {

// Elements below which an elementwise or per-row kernel runs on the calling thread alone (an OpenMP
// `if` clause): a decode step's tensors are one row per sequence, where waking the team costs more
// than the work, and much more on a loaded machine. The results do not depend on it (no reductions
// across threads in those kernels).
constexpr long kParallelMin = 1L << 15;

// The instruction set the cloned kernels run with on this machine: "avx512", "avx2" or "baseline".
const char* simd_level();

// e^x for x in float range; exact 0 below -87.33 (where e^x leaves the normal floats), saturates at e^88.
inline float exp_approx(float x) {
  const float kLog2e = 1.44269504088896341f;
  const float kLn2Hi = 0.693359375f;
  const float kLn2Lo = -2.12194440e-4f;
  const float kMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to the nearest integer
  const float xc = x < -87.33f ? -87.33f : (x > 88.0f ? 88.0f : x);
  const float shifted = xc * kLog2e + kMagic;
  const float n = shifted - kMagic;
  const int32_t ni = std::bit_cast<int32_t>(shifted) - std::bit_cast<int32_t>(kMagic);
  const float r = xc - n * kLn2Hi - n * kLn2Lo;  // |r| <= ln2/2
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r * r + r + 1.0f;
  const float scale = std::bit_cast<float>((ni + 127) << 23);
  return x < -87.33f ? 0.0f : er * scale;
}

// tanh(u) = 1 - 2 / (e^{2u} + 1); absolute error ~1e-7, which is what GELU needs.
inline float tanh_approx(float u) { return 1.0f - 2.0f / (exp_approx(2.0f * u) + 1.0f); }

// Rows [begin, end) of `n` that thread `t` of `nt` owns, in blocks of `align` (static partition).
inline void thread_range(long n, int t, int nt, long align, long* begin, long* end) {
  const long blocks = (n + align - 1) / align;
  const long b0 = blocks * t / nt, b1 = blocks * (t + 1) / nt;
  *begin = b0 * align < n ? b0 * align : n;
  *end = b1 * align < n ? b1 * align : n;
}

}  // namespace flotilla::cpu
