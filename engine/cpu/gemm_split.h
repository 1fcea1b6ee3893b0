// How a matrix product's output is cut across the OpenMP threads: shared by the fp32 sgemm path
// (matmul.cpp) and the bf16 oneDNN path (matmul_bf16.cpp), so both obey the same determinism rule.
// Internal header.
//
// Non-obvious decision: off deterministic mode each thread takes one slice (rows, or columns when
// N >= 8 M as in the LM head forward), a pure function of the shape and the thread count; in
// deterministic mode the output is cut into four fixed 16-aligned chunks that depend on the shape
// alone (matmul.h says why four), so every call, and every bit, is the same for any thread count.
#pragma once

#include <omp.h>

#include <algorithm>

#include "engine/cpu/matmul.h"
#include "engine/cpu/simd.h"

namespace flotilla::cpu {

// The rows [m0, m1) and columns [n0, n1) of C one call computes.
struct GemmSlice {
  int m0, m1, n0, n1;
};

inline bool gemm_by_columns(int M, int N) { return N >= 8L * M; }

inline GemmSlice gemm_thread_slice(int M, int N, int t, int nt) {
  long b = 0, e = 0;
  if (gemm_by_columns(M, N)) {
    thread_range(N, t, nt, 64, &b, &e);
    return {0, M, static_cast<int>(b), static_cast<int>(e)};
  }
  thread_range(M, t, nt, 16, &b, &e);
  return {static_cast<int>(b), static_cast<int>(e), 0, N};
}

constexpr int kGemmChunks = 4, kGemmChunkAlign = 16;

inline int gemm_chunk_size(int extent) {
  const int per = (extent + kGemmChunks - 1) / kGemmChunks;
  return (per + kGemmChunkAlign - 1) / kGemmChunkAlign * kGemmChunkAlign;
}
inline int gemm_chunk_count(int M, int N) {
  const int extent = gemm_by_columns(M, N) ? N : M;
  return (extent + gemm_chunk_size(extent) - 1) / gemm_chunk_size(extent);
}
inline GemmSlice gemm_chunk_slice(int M, int N, int i) {
  if (gemm_by_columns(M, N)) {
    const int c = gemm_chunk_size(N);
    return {0, M, i * c, std::min(N, (i + 1) * c)};
  }
  const int c = gemm_chunk_size(M);
  return {i * c, std::min(M, (i + 1) * c), 0, N};
}

// out's rows and columns of the slice += bias (OC) per row (matmul.cpp).
void add_bias(float* out, const float* bias, const GemmSlice& s, int OC);

// Calls fn(slice) for every slice of an (M, N) output, in parallel, by the rule above.
template <typename F>
void for_each_gemm_slice(int M, int N, F&& fn) {
  if (thread_independent_gemm()) {
    const int chunks = gemm_chunk_count(M, N);
#pragma omp parallel for schedule(static)
    for (int i = 0; i < chunks; ++i) fn(gemm_chunk_slice(M, N, i));
    return;
  }
#pragma omp parallel
  fn(gemm_thread_slice(M, N, omp_get_thread_num(), omp_get_num_threads()));
}

}  // namespace flotilla::cpu
