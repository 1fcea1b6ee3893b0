// LayerNorm (eps 1e-5) on the GPU; CPU twin: engine/cpu/layernorm.h. mean/rstd are fp32.
#pragma once

#include "engine/cuda/context.h"

namespace flotilla::cuda {

// out (N, C) = (inp - mean) * rstd * weight + bias; mean, rstd (N) kept for backward.
template <typename T>
void layernorm_forward(Context& ctx, T* out, float* mean, float* rstd, const T* inp, const T* weight,
                       const T* bias, long N, int C);

// Fused residual + LayerNorm: residual (N, C) = a + b, then out = layernorm(residual).
template <typename T>
void residual_layernorm_forward(Context& ctx, T* residual, T* out, float* mean, float* rstd, const T* a,
                                const T* b, const T* weight, const T* bias, long N, int C);

// dinp (N, C) += d/dinp; dweight, dbias (C) += their gradients. Deterministic: per-chunk partial
// column sums in scratch, then one ordered sum per column (no atomics).
template <typename T>
void layernorm_backward(Context& ctx, T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                        const T* weight, const float* mean, const float* rstd, long N, int C);

}  // namespace flotilla::cuda
