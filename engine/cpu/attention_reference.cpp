// The attention kernels as they were before the flash-style rewrite (issue 39), kept only as a
// reference for tests/engine/test_cpu_attention_flash.cpp and `flotilla-worker bench-attention`
// (old against new in the same run). Not used by any model.
//
// Each task computes a 64-query block against ALL the keys it can see at once: the scratch is
// 2 x 64 x T floats per thread (4 MiB at T = 8192, out of L2), which is what the new kernels avoid.
#include "engine/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "engine/cpu/matmul.h"
#include "engine/cpu/simd.h"

namespace flotilla::cpu::reference {
namespace {

constexpr int kQueryBlock = 64;

// The same per-thread scratch as the new kernels, so the scratch high-water mark counts both.
float* thread_scratch(size_t floats) { return attention_thread_scratch(floats); }

// A row of scores for keys k0 .. k0+n-1, of which [begin, end) are visible: turns them into
// probabilities in place (0 elsewhere) and returns the row's log-sum-exp.
FLOTILLA_SIMD_CLONES
float softmax_row(float* row, int begin, int end, int n) {
  float mx = row[begin];
#pragma omp simd reduction(max : mx)
  for (int j = begin; j < end; ++j) mx = row[j] > mx ? row[j] : mx;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int j = begin; j < end; ++j) {
    const float e = exp_approx(row[j] - mx);
    row[j] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
  for (int j = 0; j < begin; ++j) row[j] = 0.0f;
  for (int j = begin; j < end; ++j) row[j] *= inv;
  for (int j = end; j < n; ++j) row[j] = 0.0f;
  return mx + std::log(sum);
}

// P = exp(S - lse) on the visible part; dS = P * (dP - D) in place of dP.
FLOTILLA_SIMD_CLONES
void softmax_backward_row(float* p, float* dp, float lse, float d, int begin, int end, int n) {
  for (int j = 0; j < begin; ++j) {
    p[j] = 0.0f;
    dp[j] = 0.0f;
  }
  for (int j = begin; j < end; ++j) {
    const float pj = exp_approx(p[j] - lse);
    p[j] = pj;
    dp[j] = pj * (dp[j] - d);
  }
  for (int j = end; j < n; ++j) {
    p[j] = 0.0f;
    dp[j] = 0.0f;
  }
}

// First key query i of row `row_pos` may see (0 without packed documents).
inline int first_key(const int32_t* row_pos, int i) { return row_pos != nullptr ? i - row_pos[i] : 0; }

// Smallest first key over queries [i0, i0 + m).
int block_first_key(const int32_t* row_pos, int i0, int m) {
  if (row_pos == nullptr) return 0;
  int k0 = i0;
  for (int r = 0; r < m; ++r) k0 = std::min(k0, first_key(row_pos, i0 + r));
  return std::max(k0, 0);
}

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, const int32_t* pos, int B, int T, int NH,
                       int NKV, int HD) {
  blas_single_thread();
  const int group = NH / NKV;
  const int ld = (NH + 2 * NKV) * HD, ldo = NH * HD;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  constexpr int kQB = kQueryBlock;
#pragma omp parallel for schedule(dynamic, 1)
  for (int task = 0; task < B * NH; ++task) {
    const int b = task / NH, h = task % NH, g = h / group;
    const float* row = qkv + static_cast<size_t>(b) * T * ld;
    const float* q = row + static_cast<size_t>(h) * HD;
    const float* k = row + static_cast<size_t>(NH + g) * HD;
    const float* v = row + static_cast<size_t>(NH + NKV + g) * HD;
    const int32_t* rp = pos != nullptr ? pos + static_cast<size_t>(b) * T : nullptr;
    float* o = out + static_cast<size_t>(b) * T * ldo + static_cast<size_t>(h) * HD;
    float* l = lse + static_cast<size_t>(task) * T;
    float* s = thread_scratch(static_cast<size_t>(kQB) * T);  // (m, n) scores, then probabilities
    for (int i0 = 0; i0 < T; i0 += kQB) {
      const int m = std::min(kQB, T - i0), k0 = block_first_key(rp, i0, m), n = i0 + m - k0;
      gemm_serial(false, true, m, n, HD, scale, q + static_cast<size_t>(i0) * ld, ld,
                  k + static_cast<size_t>(k0) * ld, ld, 0.0f, s, n);
      for (int r = 0; r < m; ++r)
        l[i0 + r] =
            softmax_row(s + static_cast<size_t>(r) * n, first_key(rp, i0 + r) - k0, i0 + r + 1 - k0, n);
      gemm_serial(false, false, m, HD, n, 1.0f, s, n, v + static_cast<size_t>(k0) * ld, ld, 0.0f,
                  o + static_cast<size_t>(i0) * ldo, ldo);
    }
  }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        const int32_t* pos, int B, int T, int NH, int NKV, int HD) {
  blas_single_thread();
  const int group = NH / NKV;
  const int ld = (NH + 2 * NKV) * HD, ldo = NH * HD;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  constexpr int kQB = kQueryBlock;
  const int last_block = (T - 1) / kQB * kQB;
#pragma omp parallel for schedule(dynamic, 1)
  for (int task = 0; task < B * NKV; ++task) {
    const int b = task / NKV, g = task % NKV;
    const size_t row_off = static_cast<size_t>(b) * T * ld;
    const float* k = qkv + row_off + static_cast<size_t>(NH + g) * HD;
    const float* v = qkv + row_off + static_cast<size_t>(NH + NKV + g) * HD;
    float* dk = dqkv + row_off + static_cast<size_t>(NH + g) * HD;
    float* dv = dqkv + row_off + static_cast<size_t>(NH + NKV + g) * HD;
    const int32_t* rp = pos != nullptr ? pos + static_cast<size_t>(b) * T : nullptr;
    if (rp != nullptr)  // blocks then see only part of the keys: start dK and dV from zero
      for (int t = 0; t < T; ++t) {
        std::memset(dk + static_cast<size_t>(t) * ld, 0, static_cast<size_t>(HD) * sizeof(float));
        std::memset(dv + static_cast<size_t>(t) * ld, 0, static_cast<size_t>(HD) * sizeof(float));
      }
    float* p = thread_scratch(2 * static_cast<size_t>(kQB) * T + T);
    float* dp = p + static_cast<size_t>(kQB) * T;
    float* dsum = dp + static_cast<size_t>(kQB) * T;  // (T) rowwise dO . O
    for (int h = g * group; h < (g + 1) * group; ++h) {
      const size_t out_off = static_cast<size_t>(b) * T * ldo + static_cast<size_t>(h) * HD;
      const float* q = qkv + row_off + static_cast<size_t>(h) * HD;
      float* dq = dqkv + row_off + static_cast<size_t>(h) * HD;
      const float* dob = dout + out_off;
      const float* ob = out + out_off;
      const float* l = lse + (static_cast<size_t>(b) * NH + static_cast<size_t>(h)) * T;
      for (int i = 0; i < T; ++i) {
        float acc = 0.0f;
        for (int d = 0; d < HD; ++d)
          acc += dob[static_cast<size_t>(i) * ldo + d] * ob[static_cast<size_t>(i) * ldo + d];
        dsum[i] = acc;
      }
      for (int i0 = last_block; i0 >= 0; i0 -= kQB) {
        const int m = std::min(kQB, T - i0), k0 = block_first_key(rp, i0, m), n = i0 + m - k0;
        const float beta = rp == nullptr && h == g * group && i0 == last_block ? 0.0f : 1.0f;
        const float* qb = q + static_cast<size_t>(i0) * ld;
        const float* dob_i = dob + static_cast<size_t>(i0) * ldo;
        const float* kb = k + static_cast<size_t>(k0) * ld;
        gemm_serial(false, true, m, n, HD, scale, qb, ld, kb, ld, 0.0f, p, n);  // S (m, n)
        gemm_serial(false, true, m, n, HD, 1.0f, dob_i, ldo, v + static_cast<size_t>(k0) * ld, ld, 0.0f, dp,
                    n);  // dP = dO V^T
        for (int r = 0; r < m; ++r) {
          const size_t ro = static_cast<size_t>(r) * n;
          softmax_backward_row(p + ro, dp + ro, l[i0 + r], dsum[i0 + r], first_key(rp, i0 + r) - k0,
                               i0 + r + 1 - k0, n);
        }
        gemm_serial(false, false, m, HD, n, scale, dp, n, kb, ld, 0.0f, dq + static_cast<size_t>(i0) * ld,
                    ld);
        gemm_serial(true, false, n, HD, m, scale, dp, n, qb, ld, beta, dk + static_cast<size_t>(k0) * ld, ld);
        gemm_serial(true, false, n, HD, m, 1.0f, p, n, dob_i, ldo, beta, dv + static_cast<size_t>(k0) * ld,
                    ld);
      }
    }
  }
}

}  // namespace flotilla::cpu::reference
