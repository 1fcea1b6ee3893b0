// Linear layers on OpenBLAS's sgemm (loaded with the CPU's own kernel path: blas.h), threaded by
// OpenMP rather than by OpenBLAS.
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
#include "engine/cpu/simd.h"

namespace flotilla::cpu {
namespace {

// The slice of C that thread t of nt computes.
struct Slice {
  int m0, m1, n0, n1;
};

Slice gemm_slice(int M, int N, int t, int nt) {
  long b = 0, e = 0;
  if (N >= 8L * M) {
    thread_range(N, t, nt, 64, &b, &e);
    return {0, M, static_cast<int>(b), static_cast<int>(e)};
  }
  thread_range(M, t, nt, 16, &b, &e);
  return {static_cast<int>(b), static_cast<int>(e), 0, N};
}

// Deterministic mode's chunks: chunk i of chunk_count(M, N) for any thread count. Every chunk is
// one sgemm call that packs the shared operand again, so few large chunks are cheapest: four,
// 16-aligned (even work for 1, 2 and 4 threads; 5 to 8 threads leave some idle).
constexpr int kChunks = 4, kAlign = 16;
std::atomic<bool> g_fixed_chunks{false};

bool by_columns(int M, int N) { return N >= 8L * M; }
int chunk_size(int extent) {
  const int per = (extent + kChunks - 1) / kChunks;
  return (per + kAlign - 1) / kAlign * kAlign;
}
int chunk_count(int M, int N) {
  const int extent = by_columns(M, N) ? N : M;
  return (extent + chunk_size(extent) - 1) / chunk_size(extent);
}
Slice chunk_slice(int M, int N, int i) {
  if (by_columns(M, N)) {
    const int c = chunk_size(N);
    return {0, M, i * c, std::min(N, (i + 1) * c)};
  }
  const int c = chunk_size(M);
  return {i * c, std::min(M, (i + 1) * c), 0, N};
}

void gemm_slice_call(const Slice& s, bool ta, bool tb, int K, float alpha, const float* A, int lda,
                     const float* B, int ldb, float beta, float* C, int ldc) {
  if (s.m1 <= s.m0 || s.n1 <= s.n0) return;
  const float* a = ta ? A + s.m0 : A + static_cast<size_t>(s.m0) * lda;
  const float* b = tb ? B + static_cast<size_t>(s.n0) * ldb : B + s.n0;
  float* c = C + static_cast<size_t>(s.m0) * ldc + s.n0;
  blas_sgemm(ta, tb, s.m1 - s.m0, s.n1 - s.n0, K, alpha, a, lda, b, ldb, beta, c, ldc);
}

}  // namespace

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
  if (g_fixed_chunks) {
    const int chunks = chunk_count(M, N);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < chunks; ++i)
      gemm_slice_call(chunk_slice(M, N, i), trans_a, trans_b, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
#pragma omp parallel
  {
    const Slice s = gemm_slice(M, N, omp_get_thread_num(), omp_get_num_threads());
    gemm_slice_call(s, trans_a, trans_b, K, alpha, A, lda, B, ldb, beta, C, ldc);
  }
}

FLOTILLA_SIMD_CLONES
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC,
                    int OC) {
  blas_single_thread();
  // Adds the bias to a slice while it is still in cache.
  auto slice = [&](const Slice& s) {
    gemm_slice_call(s, false, true, IC, 1.0f, inp, IC, weight, IC, 0.0f, out, OC);
    if (bias == nullptr) return;
    for (int r = s.m0; r < s.m1; ++r) {
      float* o = out + static_cast<size_t>(r) * OC;
      for (int c = s.n0; c < s.n1; ++c) o[c] += bias[c];
    }
  };
  if (g_fixed_chunks) {
    const int chunks = chunk_count(N, OC);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < chunks; ++i) slice(chunk_slice(N, OC, i));
    return;
  }
#pragma omp parallel
  slice(gemm_slice(N, OC, omp_get_thread_num(), omp_get_num_threads()));
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
  gemm(true, false, OC, IC, N, 1.0f, dout, OC, inp, IC, 1.0f, dweight, IC);
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
  blas_set_threads(threads);
  time_one([&] { blas_sgemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n); });
  blas_set_threads(1);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(threads);
  time_one([&] { gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n); });
  omp_set_num_threads(saved);
  return best;
}

std::string blas_description() { return blas_info().config; }

std::string blas_core_name() { return blas_info().loaded_core; }

}  // namespace flotilla::cpu
