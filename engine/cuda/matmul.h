// Linear layers on the GPU through cuBLASLt; CPU twin: engine/cpu/matmul.h. T is float (pure fp32
// compute, no TF32, so results match the CPU to ~1e-5) or bf16 (fp32 accumulation).
#pragma once

#include "engine/cuda/context.h"

namespace flotilla::cuda {

// out (N, OC) = inp (N, IC) @ weight (OC, IC)^T + bias (OC); bias may be null. With
// gelu_out != nullptr also gelu_out (N, OC) = gelu(out), fused into cuBLASLt's GELU epilogue where
// the library offers an algorithm for it (a separate GELU kernel otherwise).
template <typename T>
void matmul_forward(Context& ctx, T* out, const T* inp, const T* weight, const T* bias, int N, int IC, int OC,
                    T* gelu_out = nullptr);

// dinp (N, IC) = dout @ weight (overwritten; skipped when null); dweight (OC, IC) += dout^T @ inp;
// dbias (OC) += column sums of dout (deterministic, skipped when null).
template <typename T>
void matmul_backward(Context& ctx, T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                     const T* weight, int N, int IC, int OC);

// Column-major D (m, n) = op(A) (m, k) @ op(B) (k, n) + beta * D, the raw cuBLASLt call used above
// (exposed for the bf16 peak measurement of bench --device cuda).
template <typename T>
void gemm(Context& ctx, T* D, const T* A, const T* B, int m, int n, int k, bool trans_a, bool trans_b,
          float beta);

// Row-major C (M, N; rows ldc apart) = alpha op(A) op(B) + beta C with leading dimensions, as the CPU's
// cpu::gemm (LoRA's products on column slices of the base projections, Backend::lora_gemm).
template <typename T>
void gemm_row_major(Context& ctx, bool ta, bool tb, int M, int N, int K, float alpha, const T* A, int lda,
                    const T* B, int ldb, float beta, T* C, int ldc);

}  // namespace flotilla::cuda
