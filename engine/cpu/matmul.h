// Matrix multiplications: the linear layers (forward/backward) on top of a threaded sgemm.
#pragma once

#include <string>

namespace flotilla::cpu {

// C (M, N) = alpha * op(A) @ op(B) + beta * C, row-major; op(X) = X^T when the flag is set.
// Split across the OpenMP threads (each runs a single-threaded BLAS call on its slice).
void gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc);

// The same on the calling thread only: for use inside an OpenMP parallel region.
void gemm_serial(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc);

// Makes BLAS run single-threaded (all parallelism comes from OpenMP); idempotent and cheap.
void blas_single_thread();

// Deterministic mode (train.deterministic): gemm() and the linear layers cut C into four fixed,
// 16-aligned chunks (of rows, or of columns for wide outputs) that depend only on the shape, one
// sgemm call per chunk, so every call and so every bit is the same for any thread count. Four,
// not many small ones: each call packs the shared operand again (64-row chunks cost 8% of the
// tokens/s of a 4-layer, C=256 model on 2 threads; four chunks measured within noise of off).
// Off: one slice per thread (bit-identical only for the same thread count). Process-wide.
void set_thread_independent_gemm(bool on);
bool thread_independent_gemm();

// out (N, OC) = inp (N, IC) @ weight (OC, IC)^T + bias (OC); bias may be null.
// N <= kMatmulRowsMax rows (a decode step) take a dot-product kernel that reads the weight once.
constexpr int kMatmulRowsMax = 8;
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int IC,
                    int OC);

// dinp (N, IC) = dout @ weight (overwritten; skipped when null); dweight (OC, IC) += dout^T @ inp;
// dbias (OC) += column sums of dout (skipped when null).
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int IC, int OC);

// dbias (OC) += column sums of dout (N, OC), summed in row order for any thread count.
void bias_backward(float* dbias, const float* dout, int N, int OC);

// Best sgemm throughput in GFLOP/s on n x n x n over `reps` calls with `threads` threads: the
// larger of BLAS's own threading and our OpenMP split. Leaves BLAS single-threaded afterwards.
double sgemm_peak_gflops(int n, int reps, int threads);

// The BLAS library and kernel in use, e.g. "OpenBLAS 0.3.21 ... / Cooperlake".
std::string blas_description();
std::string blas_core_name();

}  // namespace flotilla::cpu
