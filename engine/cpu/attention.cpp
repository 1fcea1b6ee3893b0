// Causal attention on the CPU, flash-attention style: tiled over queries AND keys, online softmax.
//
// Non-obvious decisions:
// - Forward: a task is one block of 64 (128 from T = 2048) query rows of one (batch, query head).
//   It walks the key tiles of kAttentionKeyTile rows the block can see (the fully masked tiles
//   above the diagonal, and with packed documents those before the block's first document, are
//   never visited), with an online softmax: per row a running max and sum; the output rows themselves are the
//   accumulator (rescaled by e^(old max - new max) when the max grows, divided by the sum at the end). Only
//   the per-row log-sum-exp is kept for backward (no (B, NH, T, T) tensor: 400 MB per layer for GPT-2 124M at
//   B = 8, T = 1024). The two inner products per tile are single-threaded sgemm calls.
// - Backward: a task is one (batch, K/V head). It runs its group's query heads one after another,
//   and each head's query blocks from last to first, and recomputes per key tile S, P = e^(S - lse)
//   and dP = dO V^T, dS = P (dP - D) with D = rowsum(dO * O) of the block's rows; then dQ (block)
//   += dS K, dK (tile) += dS^T Q, dV (tile) += P^T dO. Every output row has one writer and a fixed
//   order of contributions: no atomics, the same bits for any thread count, and the FLOPs of the
//   untiled kernel (no second pass over the keys for dQ, as a GPU kernel would do). Without packed
//   documents the last query block sees every key, so it initialises dK and dV (beta = 0) tile by
//   tile; with documents the K/V rows are zeroed first.
// - Scratch per thread is O(tile), independent of T (attention_scratch_floats below): the forward
//   holds one (query block, key tile) score tile, the backward two, plus a few floats per row. At
//   most 256.5 KiB. 128-row blocks from T = 2048: at T = 4096 the CPU-time ratio to the old kernel
//   went from 1.04 / 1.10 (forward / backward) with 64-row blocks to 1.13 / 1.19, but at T = 256
//   the backward fell to 0.94 (the masked half of the diagonal block grows). The kernels before
//   this one held 2 x 64 x T floats (4 MiB at T = 8192, out of L2); they live on in
//   attention_reference.cpp for the tests and bench-attention.
// - Key tile 256: at T = 256 a block is then one tile (the same sgemm calls as the untiled kernel);
//   the score tile is 64 KiB, two of them stay in a 1 MiB L2 with the K/V tile.
#include "engine/cpu/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/cpu/matmul.h"
#include "engine/cpu/simd.h"

namespace flotilla::cpu {

namespace {

std::atomic<size_t> g_scratch_high_water{0};

// A row of scores for keys j0 .. j0+n-1 of which [begin, end) are visible, after the row's running
// max and sum cover earlier tiles: turns the row into e^(s - new max) (0 where masked), updates max
// and sum, and returns the factor the row's accumulator must be multiplied by (1 when the max stays).
FLOTILLA_SIMD_CLONES
float online_softmax_row(float* row, int begin, int end, int n, float* max, float* sum) {
  if (begin >= end) {  // no visible key in this tile (packed documents)
    std::memset(row, 0, static_cast<size_t>(n) * sizeof(float));
    return 1.0f;
  }
  float mx = row[begin];
#pragma omp simd reduction(max : mx)
  for (int j = begin; j < end; ++j) mx = row[j] > mx ? row[j] : mx;
  const float old = *max;
  const float m = mx > old ? mx : old;
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int j = begin; j < end; ++j) {
    const float e = exp_approx(row[j] - m);
    row[j] = e;
    s += e;
  }
  for (int j = 0; j < begin; ++j) row[j] = 0.0f;
  for (int j = end; j < n; ++j) row[j] = 0.0f;
  const float corr =
      old == -std::numeric_limits<float>::infinity() ? 0.0f : (m > old ? exp_approx(old - m) : 1.0f);
  *sum = *sum * corr + s;
  *max = m;
  return corr;
}

// P = exp(S - lse) on the visible part; dS = P * (dP - D) in place of dP; both 0 where masked.
FLOTILLA_SIMD_CLONES
void softmax_backward_row(float* p, float* dp, float lse, float d, int begin, int end, int n) {
  begin = std::min(begin, n);
  end = std::max(end, begin);
  for (int j = 0; j < begin; ++j) {
    p[j] = 0.0f;
    dp[j] = 0.0f;
  }
#pragma omp simd
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

FLOTILLA_SIMD_CLONES
void scale_row(float* x, float f, int n) {
#pragma omp simd
  for (int d = 0; d < n; ++d) x[d] *= f;
}

FLOTILLA_SIMD_CLONES
float dot_row(const float* a, const float* b, int n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int d = 0; d < n; ++d) s += a[d] * b[d];
  return s;
}

// First key query i of a row may see (0 without packed documents).
inline int first_key(const int32_t* row_pos, int i) { return row_pos != nullptr ? i - row_pos[i] : 0; }

// Smallest first key over queries [i0, i0 + m).
int block_first_key(const int32_t* row_pos, int i0, int m) {
  if (row_pos == nullptr) return 0;
  int k0 = i0;
  for (int r = 0; r < m; ++r) k0 = std::min(k0, first_key(row_pos, i0 + r));
  return std::max(k0, 0);
}

// m query rows (q, ldq; not yet scaled) against keys [k0, kend) of k, v (ld ldk), row r seeing keys
// [lo[r], hi[r]) (absolute): o (ldo) = softmax(scale q k^T) v, lse[r] (if lse) = log-sum-exp.
// Key tiles of kKB rows. Scratch: s (m * kKB floats), mx and sum (m floats each).
void flash_block(float* o, int ldo, float* lse, const float* q, int ldq, const float* k, const float* v,
                 int ldk, int m, int k0, int kend, const int* lo, const int* hi, int HD, float scale,
                 float* s, float* mx, float* sum, int kKB = kAttentionKeyTile) {
  for (int r = 0; r < m; ++r) {
    mx[r] = -std::numeric_limits<float>::infinity();
    sum[r] = 0.0f;
  }
  for (int j0 = k0; j0 < kend; j0 += kKB) {
    const int n = std::min(kKB, kend - j0);
    gemm_serial(false, true, m, n, HD, scale, q, ldq, k + static_cast<size_t>(j0) * ldk, ldk, 0.0f, s, n);
    const bool first = j0 == k0;
    for (int r = 0; r < m; ++r) {
      const int begin = std::clamp(lo[r] - j0, 0, n), end = std::clamp(hi[r] - j0, 0, n);
      const float corr = online_softmax_row(s + static_cast<size_t>(r) * n, begin, end, n, mx + r, sum + r);
      if (!first && corr != 1.0f) scale_row(o + static_cast<size_t>(r) * ldo, corr, HD);
    }
    gemm_serial(false, false, m, HD, n, 1.0f, s, n, v + static_cast<size_t>(j0) * ldk, ldk,
                first ? 0.0f : 1.0f, o, ldo);
  }
  for (int r = 0; r < m; ++r) {
    scale_row(o + static_cast<size_t>(r) * ldo, 1.0f / sum[r], HD);
    if (lse != nullptr) lse[r] = mx[r] + std::log(sum[r]);
  }
}

}  // namespace

size_t attention_scratch_floats(bool backward, int T) {
  const size_t qb = static_cast<size_t>(attention_query_block(T)), tile = qb * kAttentionKeyTile;
  // backward: P and dP tiles, D; forward: the score tile, max, sum and two int bounds per row
  return backward ? 2 * tile + qb : tile + 4 * qb;
}

float* attention_thread_scratch(size_t floats) {
  thread_local std::vector<float> scratch;
  size_t seen = g_scratch_high_water.load(std::memory_order_relaxed);
  while (floats * sizeof(float) > seen && !g_scratch_high_water.compare_exchange_weak(
                                              seen, floats * sizeof(float), std::memory_order_relaxed)) {
  }
  if (scratch.size() < floats) scratch.resize(floats);
  return scratch.data();
}

size_t attention_scratch_high_water_bytes() { return g_scratch_high_water.load(std::memory_order_relaxed); }
void reset_attention_scratch_high_water() { g_scratch_high_water.store(0, std::memory_order_relaxed); }

void attention_forward(float* out, float* lse, const float* qkv, const int32_t* pos, int B, int T, int NH,
                       int NKV, int HD) {
  if (B <= 0 || T <= 0) return;
  blas_single_thread();
  const int group = NH / NKV;
  const int ld = (NH + 2 * NKV) * HD, ldo = NH * HD;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  const int qb = attention_query_block(T);
  const int blocks = (T + qb - 1) / qb;
  const long tasks = static_cast<long>(B) * NH * blocks;
  // Tasks run the query blocks from last to first: the costly blocks (most keys) start first.
#pragma omp parallel for schedule(dynamic, 1)
  for (long task = 0; task < tasks; ++task) {
    const int bh = static_cast<int>(task % (static_cast<long>(B) * NH));
    const int blk = blocks - 1 - static_cast<int>(task / (static_cast<long>(B) * NH));
    const int b = bh / NH, h = bh % NH, g = h / group;
    const float* row = qkv + static_cast<size_t>(b) * T * ld;
    const float* k = row + static_cast<size_t>(NH + g) * HD;
    const float* v = row + static_cast<size_t>(NH + NKV + g) * HD;
    const int32_t* rp = pos != nullptr ? pos + static_cast<size_t>(b) * T : nullptr;
    const int i0 = blk * qb, m = std::min(qb, T - i0);
    float* s = attention_thread_scratch(attention_scratch_floats(false, T));
    float* mx = s + static_cast<size_t>(qb) * kAttentionKeyTile;
    float* sum = mx + qb;
    int* lo = reinterpret_cast<int*>(sum + qb);
    int* hi = lo + qb;
    for (int r = 0; r < m; ++r) {
      lo[r] = first_key(rp, i0 + r);
      hi[r] = i0 + r + 1;
    }
    flash_block(out + (static_cast<size_t>(b) * T + i0) * ldo + static_cast<size_t>(h) * HD, ldo,
                lse + static_cast<size_t>(bh) * T + i0,
                row + static_cast<size_t>(i0) * ld + static_cast<size_t>(h) * HD, ld, k, v, ld, m,
                block_first_key(rp, i0, m), i0 + m, lo, hi, HD, scale, s, mx, sum);
  }
}

void attention_cached_forward(float* out, const float* qkv, float* kcache, float* vcache, const int32_t* pos,
                              int row0, int B, int T, int NH, int NKV, int HD, int max_len) {
  if (B <= 0 || T <= 0) return;
  blas_single_thread();
  const int group = NH / NKV;
  const int ld = (NH + 2 * NKV) * HD, ldo = NH * HD, ldc = NKV * HD;
  const size_t row_elems = static_cast<size_t>(max_len) * static_cast<size_t>(ldc);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  // Every new key and value first: a query may read any new token of its row at or before it.
#pragma omp parallel for if (static_cast <long>(B) * T * ldc >= kParallelMin)
  for (int i = 0; i < B * T; ++i) {
    const size_t at = static_cast<size_t>(row0 + i / T) * row_elems + static_cast<size_t>(pos[i]) * ldc;
    const float* src = qkv + static_cast<size_t>(i) * ld;
    std::memcpy(kcache + at, src + static_cast<size_t>(NH) * HD, static_cast<size_t>(ldc) * sizeof(float));
    std::memcpy(vcache + at, src + static_cast<size_t>(NH + NKV) * HD,
                static_cast<size_t>(ldc) * sizeof(float));
  }
  const int qb = attention_query_block(T);
  // A decode step over short rows is a few thousand multiply-adds per task: one thread then.
  const long work = static_cast<long>(B) * NH * T * HD * max_len;
#pragma omp parallel for schedule(dynamic, 1) if (work >= 32 * kParallelMin)
  for (int task = 0; task < B * NH; ++task) {
    const int b = task / NH, h = task % NH, g = h / group;
    const float* q = qkv + static_cast<size_t>(b) * T * ld + static_cast<size_t>(h) * HD;
    const size_t row = static_cast<size_t>(row0 + b) * row_elems + static_cast<size_t>(g) * HD;
    const int32_t* rp = pos + static_cast<size_t>(b) * T;
    float* o = out + static_cast<size_t>(b) * T * ldo + static_cast<size_t>(h) * HD;
    // A decode step (a few rows) takes its whole row of keys as one tile, as before the tiling: two
    // sgemm calls instead of two per 256 keys, and a scratch of T x max_len floats (T <= 8).
    const int tile = T <= kMatmulRowsMax ? std::max(max_len, 1) : kAttentionKeyTile;
    const size_t tile_floats = static_cast<size_t>(std::min(qb, T)) * tile;
    float* s = attention_thread_scratch(tile_floats + 4 * static_cast<size_t>(qb));
    float* mx = s + tile_floats;
    float* sum = mx + qb;
    int* lo = reinterpret_cast<int*>(sum + qb);
    int* hi = lo + qb;
    for (int i0 = 0; i0 < T; i0 += qb) {
      const int m = std::min(qb, T - i0);
      int n = 0;
      for (int r = 0; r < m; ++r) {
        lo[r] = 0;
        hi[r] = rp[i0 + r] + 1;
        n = std::max(n, hi[r]);
      }
      flash_block(o + static_cast<size_t>(i0) * ldo, ldo, nullptr, q + static_cast<size_t>(i0) * ld, ld,
                  kcache + row, vcache + row, ldc, m, 0, n, lo, hi, HD, scale, s, mx, sum, tile);
    }
  }
}

void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        const int32_t* pos, int B, int T, int NH, int NKV, int HD) {
  if (B <= 0 || T <= 0) return;
  blas_single_thread();
  const int group = NH / NKV;
  const int ld = (NH + 2 * NKV) * HD, ldo = NH * HD;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  const int qb = attention_query_block(T);
  constexpr int kKB = kAttentionKeyTile;
  const int last_block = (T - 1) / qb * qb;
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
    float* p = attention_thread_scratch(attention_scratch_floats(true, T));
    float* dp = p + static_cast<size_t>(qb) * kKB;
    float* dsum = dp + static_cast<size_t>(qb) * kKB;  // (qb) rowwise dO . O of the block
    for (int h = g * group; h < (g + 1) * group; ++h) {
      const size_t out_off = static_cast<size_t>(b) * T * ldo + static_cast<size_t>(h) * HD;
      const float* q = qkv + row_off + static_cast<size_t>(h) * HD;
      float* dq = dqkv + row_off + static_cast<size_t>(h) * HD;
      const float* dob = dout + out_off;
      const float* ob = out + out_off;
      const float* l = lse + (static_cast<size_t>(b) * NH + static_cast<size_t>(h)) * T;
      for (int i0 = last_block; i0 >= 0; i0 -= qb) {
        const int m = std::min(qb, T - i0), k0 = block_first_key(rp, i0, m), kend = i0 + m;
        const float beta = rp == nullptr && h == g * group && i0 == last_block ? 0.0f : 1.0f;
        const float* qb = q + static_cast<size_t>(i0) * ld;
        const float* dob_i = dob + static_cast<size_t>(i0) * ldo;
        float* dqb = dq + static_cast<size_t>(i0) * ld;
        for (int r = 0; r < m; ++r)
          dsum[r] = dot_row(dob_i + static_cast<size_t>(r) * ldo, ob + static_cast<size_t>(i0 + r) * ldo, HD);
        for (int j0 = k0; j0 < kend; j0 += kKB) {
          const int n = std::min(kKB, kend - j0);
          const float* kb = k + static_cast<size_t>(j0) * ld;
          gemm_serial(false, true, m, n, HD, scale, qb, ld, kb, ld, 0.0f, p, n);  // S (m, n)
          gemm_serial(false, true, m, n, HD, 1.0f, dob_i, ldo, v + static_cast<size_t>(j0) * ld, ld, 0.0f, dp,
                      n);  // dP = dO V^T
          for (int r = 0; r < m; ++r) {
            const size_t ro = static_cast<size_t>(r) * n;
            softmax_backward_row(p + ro, dp + ro, l[i0 + r], dsum[r], std::max(first_key(rp, i0 + r) - j0, 0),
                                 std::min(i0 + r + 1 - j0, n), n);
          }
          gemm_serial(false, false, m, HD, n, scale, dp, n, kb, ld, j0 == k0 ? 0.0f : 1.0f, dqb, ld);
          gemm_serial(true, false, n, HD, m, scale, dp, n, qb, ld, beta, dk + static_cast<size_t>(j0) * ld,
                      ld);
          gemm_serial(true, false, n, HD, m, 1.0f, p, n, dob_i, ldo, beta, dv + static_cast<size_t>(j0) * ld,
                      ld);
        }
      }
    }
  }
}

}  // namespace flotilla::cpu
