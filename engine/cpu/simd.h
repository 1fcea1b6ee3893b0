// SIMD dispatch and vectorisable math for the CPU kernels.
//
// One non-obvious decision: the build is portable (no -march=native), so every hot kernel is
// compiled three times with GCC's target_clones (x86-64-v4 = AVX-512, x86-64-v3 = AVX2+FMA, and the
// baseline) and the loader picks one per process with cpuid (an ifunc). The kernels are plain loops
// the compiler vectorises; OpenMP regions inside a cloned function are cloned with it. exp and tanh
// are our own branch-free polynomials (Cephes-style range reduction), because libm's scalar calls
// block vectorisation without -ffast-math. exp_approx (softmax, attention, GELU's tanh) flushes
// results below e^-87.33 to 0 and saturates at e^88: inside those it is about 1 ulp, and the flush
// keeps subnormals (slow on some CPUs) out of the hot loops whose arguments are x - max <= 0.
// exp_f32 (SwiGLU's sigmoid, which feeds every later layer of a Llama) is the same polynomial with
// the whole fp32 range handled: subnormal results, +inf above ln(FLT_MAX), 0 below, NaN in NaN out.
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

// e^x for every float x, within 1.03 ulp of the exact value (checked against double over all 2^32
// inputs by tests/engine/test_cpu_exp.cpp, with and without FMA). Cody-Waite reduction x = n ln2 + r
// (ln2 split in a 9-bit head, so n * head is exact, and a tail), |r| <= ln2/2, Cephes' degree-7
// minimax polynomial for e^r, then 2^n applied as two factors 2^(n>>1) * 2^(n - (n>>1)): each is a
// normal float for every n in [-150, 128], the first product is exact and the second rounds once, so
// subnormal results and e^88.72 (n = 128) come out right. Branch-free (the compiler turns the
// selects into blends), so loops over it vectorise.
inline float exp_f32(float x) {
  const float kLog2e = 1.44269504088896341f;
  const float kLn2Hi = 0.693359375f;
  const float kLn2Lo = -2.12194440e-4f;
  const float kMagic = 12582912.0f;        // 1.5 * 2^23: adding it rounds to the nearest integer
  const float kHi = 88.722831726074219f;   // the largest x with e^x < FLT_MAX (+ half an ulp)
  const float kLo = -103.97207641601562f;  // the smallest x with e^x > 2^-150 (rounds to 2^-149)
  const float xc = x < kLo ? kLo : (x > kHi ? kHi : x);
  const float shifted = xc * kLog2e + kMagic;
  const float n = shifted - kMagic;
  const int32_t ni = static_cast<int32_t>(std::bit_cast<uint32_t>(shifted) - std::bit_cast<uint32_t>(kMagic));
  const float r = xc - n * kLn2Hi - n * kLn2Lo;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r * r + r + 1.0f;
  const int32_t n1 = ni >> 1, n2 = ni - n1;
  const float s1 = std::bit_cast<float>(static_cast<uint32_t>(n1 + 127) << 23);
  const float s2 = std::bit_cast<float>(static_cast<uint32_t>(n2 + 127) << 23);
  const float y = er * s1 * s2;
  const float capped = x > kHi ? __builtin_inff() : y;
  const float floored = x < kLo ? 0.0f : capped;
  return x != x ? x + x : floored;  // NaN (quietened) in, NaN out
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
