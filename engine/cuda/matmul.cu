// cuBLASLt matmuls for the linear layers. Non-obvious decisions:
// - Row-major out (N, OC) = inp (N, IC) @ W (OC, IC)^T is computed as the column-major product
//   out^T (OC, N) = op_T(W stored as (IC, OC)) @ inp stored as (IC, N): cuBLASLt reads the weight
//   transposed and the input as is, so no tensor is copied or transposed in memory (as llm.c).
// - Bias and GELU ride in cuBLASLt epilogues; the bias gradient is NOT taken from the BGRADB
//   epilogue (it overwrites instead of accumulating, and its reduction order is the library's)
//   but from our own two-pass column sum, so it accumulates and is deterministic.
// - In deterministic mode the heuristic is restricted to reduction schemes without split-K
//   accumulation in a library-chosen order (CUBLASLT_REDUCTION_SCHEME_NONE); if no algorithm
//   qualifies, the unrestricted query is used and the results stay reproducible on one GPU model.
// - The heuristic runs once per shape (Context::lt_algos); every later call of that shape runs the
//   same algorithm, so a run never switches algorithms (and bits) midway.
#include <string>
#include <type_traits>

#include "engine/core/error.h"

#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/gelu.h"
#include "engine/cuda/matmul.h"

namespace flotilla::cuda {
namespace {

template <typename T>
constexpr cudaDataType_t data_type() {
  return std::is_same<T, float>::value ? CUDA_R_32F : CUDA_R_16BF;
}

// RAII holders for the cuBLASLt descriptors of one call.
struct Descs {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descs() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

// D = op(A) op(B) (+ beta D), optional epilogue; returns false when no algorithm exists for the
// epilogue (the caller falls back), throws on any other failure.
// lda, ldb, ldd: leading dimensions (0: the stored row count, i.e. contiguous); alpha scales op(A) op(B).
template <typename T>
bool lt_matmul(Context& ctx, T* D, const T* A, const T* B, const T* bias, int m, int n, int k, bool trans_a,
               bool trans_b, float beta, cublasLtEpilogue_t epilogue, T* aux, int ld_aux, float alpha = 1.0f,
               int lda = 0, int ldb = 0, int ldd = 0) {
  const cudaDataType_t type = data_type<T>();
  Descs s;
  check_cublas(cublasLtMatmulDescCreate(&s.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  check_cublas(cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "set TRANSA");
  check_cublas(cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "set TRANSB");
  check_cublas(cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)),
               "set EPILOGUE");
  if (bias != nullptr)
    check_cublas(cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
                 "set BIAS_POINTER");
  if (aux != nullptr) {
    const int64_t ld = ld_aux;
    check_cublas(cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)),
                 "set EPILOGUE_AUX_POINTER");
    check_cublas(cublasLtMatmulDescSetAttribute(s.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)),
                 "set EPILOGUE_AUX_LD");
  }
  // Stored shapes (column-major): A is (m, k) or, transposed, (k, m); B is (k, n) or (n, k).
  const int a_rows = trans_a ? k : m, b_rows = trans_b ? n : k;
  check_cublas(cublasLtMatrixLayoutCreate(&s.a, type, a_rows, trans_a ? m : k, lda > 0 ? lda : a_rows), "layout A");
  check_cublas(cublasLtMatrixLayoutCreate(&s.b, type, b_rows, trans_b ? k : n, ldb > 0 ? ldb : b_rows), "layout B");
  check_cublas(cublasLtMatrixLayoutCreate(&s.d, type, m, n, ldd > 0 ? ldd : m), "layout D");
  check_cublas(cublasLtMatmulPreferenceCreate(&s.pref), "cublasLtMatmulPreferenceCreate");
  const size_t ws = ctx.lt_workspace_bytes();
  check_cublas(cublasLtMatmulPreferenceSetAttribute(s.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
               "set MAX_WORKSPACE_BYTES");
  const Context::LtKey key{static_cast<int>(type), m, n, k, trans_a, trans_b, static_cast<int>(epilogue),
                           bias != nullptr, aux != nullptr ? ld_aux : -1, ctx.deterministic, lda, ldb, ldd};
  const auto cached = ctx.lt_algos.find(key);
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  if (cached != ctx.lt_algos.end()) {
    if (!cached->second.found) return false;  // known: no algorithm for this epilogue
    heuristic.algo = cached->second.algo;
    found = 1;
  }
  if (found == 0 && ctx.deterministic) {
    const uint32_t mask = CUBLASLT_REDUCTION_SCHEME_NONE;
    check_cublas(
        cublasLtMatmulPreferenceSetAttribute(s.pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &mask, sizeof(mask)),
        "set REDUCTION_SCHEME_MASK");
    if (cublasLtMatmulAlgoGetHeuristic(ctx.lt(), s.op, s.a, s.b, s.d, s.d, s.pref, 1, &heuristic, &found) !=
        CUBLAS_STATUS_SUCCESS)
      found = 0;
    if (found == 0) {
      const uint32_t any = CUBLASLT_REDUCTION_SCHEME_MASK;
      check_cublas(
          cublasLtMatmulPreferenceSetAttribute(s.pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &any, sizeof(any)),
          "set REDUCTION_SCHEME_MASK");
    }
  }
  if (found == 0 &&
      cublasLtMatmulAlgoGetHeuristic(ctx.lt(), s.op, s.a, s.b, s.d, s.d, s.pref, 1, &heuristic, &found) !=
          CUBLAS_STATUS_SUCCESS)
    found = 0;
  if (cached == ctx.lt_algos.end()) ctx.lt_algos[key] = Context::LtChoice{found != 0, heuristic.algo};
  if (found == 0) {
    if (epilogue != CUBLASLT_EPILOGUE_DEFAULT && epilogue != CUBLASLT_EPILOGUE_BIAS) return false;
    throw Error(ExitCode::kInternal, "cuBLASLt: no matmul algorithm for m=" + std::to_string(m) + " n=" +
                                         std::to_string(n) + " k=" + std::to_string(k) +
                                         " (check the CUDA toolkit and driver versions)");
  }
  check_cublas(cublasLtMatmul(ctx.lt(), s.op, &alpha, A, s.a, B, s.b, &beta, D, s.d, D, s.d, &heuristic.algo,
                              ctx.lt_workspace(), ws, ctx.stream()),
               "cublasLtMatmul");
  return true;
}

// partial[chunk, c] = column sums of dout over the chunk's rows (in order).
template <typename T>
__global__ void bias_partial_kernel(float* partial, const T* dout, int N, int OC, int chunk) {
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= OC) return;
  const int r0 = blockIdx.x * chunk;
  const int r1 = r0 + chunk < N ? r0 + chunk : N;
  float s = 0.0f;
  for (int r = r0; r < r1; ++r) s += to_f(dout[static_cast<size_t>(r) * OC + c]);
  partial[static_cast<size_t>(blockIdx.x) * OC + c] = s;
}

template <typename T>
__global__ void bias_final_kernel(T* dbias, const float* partial, int chunks, int OC) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= OC) return;
  float s = 0.0f;
  for (int k = 0; k < chunks; ++k) s += partial[static_cast<size_t>(k) * OC + c];
  dbias[c] = from_f<T>(to_f(dbias[c]) + s);
}

template <typename T>
void bias_backward(Context& ctx, T* dbias, const T* dout, int N, int OC) {
  int chunk = (N + 255) / 256;
  if (chunk < 32) chunk = 32;
  const int chunks = (N + chunk - 1) / chunk;
  auto* partial = static_cast<float*>(ctx.scratch(static_cast<size_t>(chunks) * OC * sizeof(float)));
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>((OC + 255) / 256));
  bias_partial_kernel<T><<<grid, 256, 0, ctx.stream()>>>(partial, dout, N, OC, chunk);
  check_launch("bias_backward (partials)");
  bias_final_kernel<T><<<static_cast<unsigned>((OC + 255) / 256), 256, 0, ctx.stream()>>>(dbias, partial, chunks, OC);
  check_launch("bias_backward (final)");
}

}  // namespace

template <typename T>
void gemm(Context& ctx, T* D, const T* A, const T* B, int m, int n, int k, bool trans_a, bool trans_b, float beta) {
  lt_matmul<T>(ctx, D, A, B, nullptr, m, n, k, trans_a, trans_b, beta, CUBLASLT_EPILOGUE_DEFAULT, nullptr, 0);
}

template <typename T>
void gemm_row_major(Context& ctx, bool ta, bool tb, int M, int N, int K, float alpha, const T* A, int lda,
                    const T* B, int ldb, float beta, T* C, int ldc) {
  if (M == 0 || N == 0) return;
  // Row-major C (M, N) is column-major C^T (N, M) with the same leading dimension, and
  // C^T = op(B)^T op(A)^T: B's storage read column-major is B^T (so no transpose unless tb), A's is A^T.
  lt_matmul<T>(ctx, C, B, A, nullptr, N, M, K, tb, ta, beta, CUBLASLT_EPILOGUE_DEFAULT, nullptr, 0, alpha, ldb, lda,
               ldc);
}

template <typename T>
void matmul_forward(Context& ctx, T* out, const T* inp, const T* weight, const T* bias, int N, int IC, int OC,
                    T* gelu_out) {
  if (N == 0 || OC == 0) return;
  // Column-major: out^T (OC, N) = W (stored (IC, OC), transposed) @ inp^T (IC, N).
  if (gelu_out != nullptr) {
    const cublasLtEpilogue_t ep = bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    if (lt_matmul<T>(ctx, gelu_out, weight, inp, bias, OC, N, IC, true, false, 0.0f, ep, out, OC)) return;
  }
  const cublasLtEpilogue_t ep = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
  lt_matmul<T>(ctx, out, weight, inp, bias, OC, N, IC, true, false, 0.0f, ep, nullptr, 0);
  if (gelu_out != nullptr) gelu_forward<T>(ctx, gelu_out, out, static_cast<size_t>(N) * OC);
}

template <typename T>
void matmul_backward(Context& ctx, T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight,
                     int N, int IC, int OC) {
  if (N == 0) return;
  // dinp^T (IC, N) = W^T (stored (IC, OC)) @ dout^T (OC, N).
  if (dinp != nullptr)
    lt_matmul<T>(ctx, dinp, weight, dout, nullptr, IC, N, OC, false, false, 0.0f, CUBLASLT_EPILOGUE_DEFAULT, nullptr,
                 0);
  // dweight^T (IC, OC) += inp^T (stored (IC, N)) @ dout (stored (OC, N), transposed).
  if (dweight != nullptr)
    lt_matmul<T>(ctx, dweight, inp, dout, nullptr, IC, OC, N, false, true, 1.0f, CUBLASLT_EPILOGUE_DEFAULT, nullptr,
                 0);
  if (dbias != nullptr) bias_backward<T>(ctx, dbias, dout, N, OC);
}

#define FLOTILLA_MM(T)                                                                                        \
  template void gemm<T>(Context&, T*, const T*, const T*, int, int, int, bool, bool, float);                 \
  template void gemm_row_major<T>(Context&, bool, bool, int, int, int, float, const T*, int, const T*, int, float, \
                                  T*, int);                                                                   \
  template void matmul_forward<T>(Context&, T*, const T*, const T*, const T*, int, int, int, T*);            \
  template void matmul_backward<T>(Context&, T*, T*, T*, const T*, const T*, const T*, int, int, int);
FLOTILLA_MM(float)
FLOTILLA_MM(bf16)
#undef FLOTILLA_MM

}  // namespace flotilla::cuda
