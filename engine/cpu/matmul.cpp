// Linear layers on the engine's fp32 sgemm (oneDNN's, else OpenBLAS's loaded with the CPU's own
// kernel path: blas.h), threaded by OpenMP rather than by the library.
//
// Non-obvious decision: OpenBLAS is set to one thread and each OpenMP thread multiplies its own
// slice of the output (rows, or columns when N >= 8 M as in the LM head forward). Measured on a
// 2-core Zen 4 with OpenBLAS 0.3.21 (pthread build) this runs the model's shapes at 190-205 GFLOP/s
// against 170-200 for OpenBLAS's own threading, and it avoids two thread pools (OpenMP's and
// OpenBLAS's) spinning against each other on the same cores. The split is a pure function of the
// shape and the thread count, so results are bit-identical run to run for a given thread count;
// in deterministic mode it is a pure function of the shape alone (fixed chunks), so they are
// bit-identical for any thread count.
#include "engine/cpu/matmul.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <vector>

#include "engine/cpu/blas.h"
#include "engine/cpu/gemm_split.h"
#include "engine/cpu/simd.h"

namespace flotilla::cpu {
namespace {

std::atomic<bool> g_fixed_chunks{false};

void gemm_slice_call(const GemmSlice& s, bool ta, bool tb, int K, float alpha, const float* A, int lda,
                     const float* B, int ldb, float beta, float* C, int ldc) {
  if (s.m1 <= s.m0 || s.n1 <= s.n0) return;
  const float* a = ta ? A + s.m0 : A + static_cast<size_t>(s.m0) * lda;
  const float* b = tb ? B + static_cast<size_t>(s.n0) * ldb : B + s.n0;
  float* c = C + static_cast<size_t>(s.m0) * ldc + s.n0;
  blas_sgemm(ta, tb, s.m1 - s.m0, s.n1 - s.n0, K, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

FLOTILLA_SIMD_CLONES
void add_bias(float* out, const float* bias, const GemmSlice& s, int OC) {
  for (int r = s.m0; r < s.m1; ++r) {
    float* o = out + static_cast<size_t>(r) * OC;
    for (int c = s.n0; c < s.n1; ++c) o[c] += bias[c];
  }
}

void blas_single_thread() {
  if (blas_threads() != 1) blas_set_threads(1);
}

void gemm_serial(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  blas_sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void set_thread_independent_gemm(bool on) { g_fixed_chunks = on; }
bool thread_independent_gemm() { return g_fixed_chunks; }

void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
  blas_single_thread();
  for_each_gemm_slice(M, N, [&](const GemmSlice& s) {
    gemm_slice_call(s, trans_a, trans_b, K, alpha, A, lda, B, ldb, beta, C, ldc);
  });
}

// A few rows (a decode step: one per sequence): sgemm packs the whole weight for M = 1 and runs at a
// fraction of memory bandwidth, so here each weight row is read once per 4 input rows. The lanes are
// summed in a fixed order at the end, and the split is over output columns, so the result does not
// depend on the thread count.
//
// Output columns o0 .. o0 + rows - 1 (rows <= 4) for inputs n0 .. n0 + NB - 1: 4 x NB accumulators of 16
// lanes in registers, each x load feeding 4 FMAs and each w load NB. Inlined into the cloned caller so it
// is compiled for each instruction set.
template <int NB>
__attribute__((always_inline)) inline void matmul_rows_block(float* out, const float* inp,
                                                             const float* weight, const float* bias, int IC,
                                                             int OC, int o0, int rows, int n0) {
  constexpr int kL = 16;
  const int body = IC / kL * kL;
  const float* w[4];
  for (int r = 0; r < 4; ++r) w[r] = weight + static_cast<size_t>(o0 + (r < rows ? r : 0)) * IC;
  const float* x[NB];
  for (int n = 0; n < NB; ++n) x[n] = inp + static_cast<size_t>(n0 + n) * IC;
  float acc[4][NB][kL] = {};
  for (int i0 = 0; i0 < body; i0 += kL) {
#pragma GCC unroll 4
    for (int n = 0; n < NB; ++n) {
#pragma omp simd
      for (int l = 0; l < kL; ++l) {
        const float xv = x[n][i0 + l];
        acc[0][n][l] += xv * w[0][i0 + l];
        acc[1][n][l] += xv * w[1][i0 + l];
        acc[2][n][l] += xv * w[2][i0 + l];
        acc[3][n][l] += xv * w[3][i0 + l];
      }
    }
  }
  for (int r = 0; r < rows; ++r)
    for (int n = 0; n < NB; ++n) {
      float sum = 0.0f;
      for (int l = 0; l < kL; ++l) sum += acc[r][n][l];
      for (int i = body; i < IC; ++i) sum += x[n][i] * w[r][i];
      out[static_cast<size_t>(n0 + n) * OC + o0 + r] = bias != nullptr ? sum + bias[o0 + r] : sum;
    }
}

FLOTILLA_SIMD_CLONES
void matmul_forward_rows(float* out, const float* inp, const float* weight, const float* bias, int N, int IC,
                         int OC) {
  const int quads = (OC + 3) / 4;
#pragma omp parallel for schedule(static) if (static_cast <long>(OC) * IC >= 32 * kParallelMin)
  for (int p = 0; p < quads; ++p) {
    const int o0 = 4 * p, rows = o0 + 4 <= OC ? 4 : OC - o0;
    if (N == 1) {  // one input: a plain dot per output column streams the weight fastest
      for (int r = 0; r < rows; ++r) {
        const float* w = weight + static_cast<size_t>(o0 + r) * IC;
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int i = 0; i < IC; ++i) acc += inp[i] * w[i];
        out[o0 + r] = bias != nullptr ? acc + bias[o0 + r] : acc;
      }
      continue;
    }
    int n0 = 0;
    for (; n0 + 4 <= N; n0 += 4) matmul_rows_block<4>(out, inp, weight, bias, IC, OC, o0, rows, n0);
    switch (N - n0) {
      case 1:
        matmul_rows_block<1>(out, inp, weight, bias, IC, OC, o0, rows, n0);
        break;
      case 2:
        matmul_rows_block<2>(out, inp, weight, bias, IC, OC, o0, rows, n0);
        break;
      case 3:
        matmul_rows_block<3>(out, inp, weight, bias, IC, OC, o0, rows, n0);
        break;
      default:
        break;
    }
  }
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC,
                    int OC) {
  if (N <= kMatmulRowsMax) {
    matmul_forward_rows(out, inp, weight, bias, N, IC, OC);
    return;
  }
  blas_single_thread();
  // Adds the bias to a slice while it is still in cache.
  for_each_gemm_slice(N, OC, [&](const GemmSlice& s) {
    gemm_slice_call(s, false, true, IC, 1.0f, inp, IC, weight, IC, 0.0f, out, OC);
    if (bias != nullptr) add_bias(out, bias, s, OC);
  });
}

FLOTILLA_SIMD_CLONES
void bias_backward(float* dbias, const float* dout, int N, int OC) {
  constexpr int kBlock = 64;
  const int blocks = (OC + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < blocks; ++blk) {
    const int c0 = blk * kBlock, c1 = std::min(c0 + kBlock, OC);
    float acc[kBlock] = {};
    for (int r = 0; r < N; ++r) {
      const float* d = dout + static_cast<size_t>(r) * OC;
      for (int c = c0; c < c1; ++c) acc[c - c0] += d[c];
    }
    for (int c = c0; c < c1; ++c) dbias[c] += acc[c - c0];
  }
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC) {
  if (dinp != nullptr) gemm(false, false, N, IC, OC, 1.0f, dout, OC, weight, IC, 0.0f, dinp, IC);
  if (dweight != nullptr) gemm(true, false, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dweight, IC);
  if (dbias != nullptr) bias_backward(dbias, dout, N, OC);
}

double sgemm_peak_gflops(int n, int reps, int threads) {
  const size_t nn = static_cast<size_t>(n) * n;
  std::vector<float> a(nn), b(nn), c(nn);
  for (size_t i = 0; i < nn; ++i) {
    a[i] = static_cast<float>(i % 13) * 0.01f - 0.06f;
    b[i] = static_cast<float>(i % 7) * 0.01f - 0.03f;
  }
  const double flops = 2.0 * n * static_cast<double>(n) * n;
  double best = 0;
  auto time_one = [&](auto&& fn) {
    for (int r = 0; r < reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      fn();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::max(best, flops / s / 1e9);
    }
  };
  if (!blas_info().onednn_sgemm) {  // OpenBLAS's own threading (oneDNN's sgemm runs one thread per call)
    blas_set_threads(threads);
    time_one([&] { blas_sgemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n); });
    blas_set_threads(1);
  }
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  time_one([&] { gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n); });
  omp_set_num_threads(saved);
  return best;
}

std::string blas_description() { return blas_info().config; }

std::string blas_core_name() { return blas_info().loaded_core; }

}  // namespace flotilla::cpu
