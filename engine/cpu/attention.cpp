// Causal attention, tiled over query blocks, with the flash-attention memory trick on the CPU.
//
// Non-obvious decision: we keep only the per-row log-sum-exp from the forward and recompute the
// scores in backward, one block of 64 query rows at a time (scores for keys 0..end of block only,
// so the masked upper triangle is skipped except inside the diagonal block). The (B, NH, T, T)
// probability tensor llm.c stores would be 400 MB per layer for GPT-2 124M at B=8, T=1024; here
// the scratch is 2 x 64 x T floats per thread and stays in L2. Each (batch, head) pair is one task
// that writes disjoint outputs, so tasks can be scheduled dynamically with deterministic results.
// Backward walks query blocks from last to first so the first block touches every key row and can
// initialise dK and dV with beta = 0.
#include "engine/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "engine/cpu/matmul.h"
#include "engine/cpu/simd.h"

namespace flotilla::cpu {
namespace {

float* thread_scratch(size_t floats) {
  thread_local std::vector<float> scratch;
  if (scratch.size() < floats) scratch.resize(floats);
  return scratch.data();
}

// Row r of the block holds query i = i0 + r against keys 0..n-1; keys j > i are masked.
// Turns scores into probabilities in place and returns the row's log-sum-exp.
FLOTILLA_SIMD_CLONES
float softmax_row(float* row, int valid, int n) {
  float mx = row[0];
#pragma omp simd reduction(max : mx)
  for (int j = 0; j < valid; ++j) mx = row[j] > mx ? row[j] : mx;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < valid; ++j) {
    const float e = exp_approx(row[j] - mx);
    row[j] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
  for (int j = 0; j < valid; ++j) row[j] *= inv;
  for (int j = valid; j < n; ++j) row[j] = 0.0f;
  return mx + std::log(sum);
}

// P = exp(S - lse) on the causal part; dS = P * (dP - D) in place of dP.
FLOTILLA_SIMD_CLONES
void softmax_backward_row(float* p, float* dp, float lse, float d, int valid, int n) {
  for (int j = 0; j < valid; ++j) {
    const float pj = exp_approx(p[j] - lse);
    p[j] = pj;
    dp[j] = pj * (dp[j] - d);
  }
  for (int j = valid; j < n; ++j) {
    p[j] = 0.0f;
    dp[j] = 0.0f;
  }
}

}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH) {
  blas_single_thread();
  const int hs = C / NH;
  const int ld = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  constexpr int kQB = kAttentionQueryBlock;
#pragma omp parallel for schedule(dynamic, 1)
  for (int task = 0; task < B * NH; ++task) {
    const int b = task / NH, h = task % NH;
    const float* q = qkv + static_cast<size_t>(b) * T * ld + static_cast<size_t>(h) * hs;
    const float* k = q + C;
    const float* v = q + 2 * C;
    float* o = out + static_cast<size_t>(b) * T * C + static_cast<size_t>(h) * hs;
    float* l = lse + static_cast<size_t>(task) * T;
    float* s = thread_scratch(static_cast<size_t>(kQB) * T);  // (m, n) scores, then probabilities
    for (int i0 = 0; i0 < T; i0 += kQB) {
      const int m = std::min(kQB, T - i0), n = i0 + m;
      gemm_serial(false, true, m, n, hs, scale, q + static_cast<size_t>(i0) * ld, ld, k, ld, 0.0f, s, n);
      for (int r = 0; r < m; ++r) l[i0 + r] = softmax_row(s + static_cast<size_t>(r) * n, i0 + r + 1, n);
      gemm_serial(false, false, m, hs, n, 1.0f, s, n, v, ld, 0.0f, o + static_cast<size_t>(i0) * C, C);
    }
  }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        int B, int T, int C, int NH) {
  blas_single_thread();
  const int hs = C / NH;
  const int ld = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  constexpr int kQB = kAttentionQueryBlock;
  const int last_block = (T - 1) / kQB * kQB;
#pragma omp parallel for schedule(dynamic, 1)
  for (int task = 0; task < B * NH; ++task) {
    const int b = task / NH, h = task % NH;
    const size_t qkv_off = static_cast<size_t>(b) * T * ld + static_cast<size_t>(h) * hs;
    const size_t out_off = static_cast<size_t>(b) * T * C + static_cast<size_t>(h) * hs;
    const float* q = qkv + qkv_off;
    const float* k = q + C;
    const float* v = q + 2 * C;
    float* dq = dqkv + qkv_off;
    float* dk = dq + C;
    float* dv = dq + 2 * C;
    const float* dob = dout + out_off;
    const float* ob = out + out_off;
    const float* l = lse + static_cast<size_t>(task) * T;
    float* p = thread_scratch(2 * static_cast<size_t>(kQB) * T + T);
    float* dp = p + static_cast<size_t>(kQB) * T;
    float* dsum = dp + static_cast<size_t>(kQB) * T;  // (T) rowwise dO . O
    for (int i = 0; i < T; ++i) {
      float acc = 0.0f;
      for (int d = 0; d < hs; ++d)
        acc += dob[static_cast<size_t>(i) * C + d] * ob[static_cast<size_t>(i) * C + d];
      dsum[i] = acc;
    }
    for (int i0 = last_block; i0 >= 0; i0 -= kQB) {
      const int m = std::min(kQB, T - i0), n = i0 + m;
      const float beta = i0 == last_block ? 0.0f : 1.0f;
      const float* qb = q + static_cast<size_t>(i0) * ld;
      const float* dob_i = dob + static_cast<size_t>(i0) * C;
      gemm_serial(false, true, m, n, hs, scale, qb, ld, k, ld, 0.0f, p, n);    // S (m, n)
      gemm_serial(false, true, m, n, hs, 1.0f, dob_i, C, v, ld, 0.0f, dp, n);  // dP = dO V^T
      for (int r = 0; r < m; ++r) {
        const size_t ro = static_cast<size_t>(r) * n;
        softmax_backward_row(p + ro, dp + ro, l[i0 + r], dsum[i0 + r], i0 + r + 1, n);
      }
      gemm_serial(false, false, m, hs, n, scale, dp, n, k, ld, 0.0f, dq + static_cast<size_t>(i0) * ld, ld);
      gemm_serial(true, false, n, hs, m, scale, dp, n, qb, ld, beta, dk, ld);
      gemm_serial(true, false, n, hs, m, 1.0f, p, n, dob_i, C, beta, dv, ld);
    }
  }
}

}  // namespace flotilla::cpu
