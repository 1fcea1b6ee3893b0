// RMSNorm (Llama family) and the per-head q/k RMSNorm (Qwen 3) on the GPU; CPU twin:
// engine/cpu/rmsnorm.h. Statistics in fp32; T is float or bf16 storage.
#pragma once

#include "engine/cuda/context.h"

namespace flotilla::cuda {

// out (N, C) = inp * rstd * weight, rstd (N) = 1 / sqrt(mean(inp^2) + eps).
template <typename T>
void rmsnorm_forward(Context& ctx, T* out, float* rstd, const T* inp, const T* weight, long N, int C,
                     float eps);
// Fused residual + RMSNorm: residual (N, C) = a + b, then out = rmsnorm(residual).
template <typename T>
void residual_rmsnorm_forward(Context& ctx, T* residual, T* out, float* rstd, const T* a, const T* b,
                              const T* weight, long N, int C, float eps);
// dinp (N, C) += d/dinp; dweight (C) += column sums of dout * inp * rstd (fixed row chunks, then
// chunks in order: deterministic on any GPU).
template <typename T>
void rmsnorm_backward(Context& ctx, T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                      const float* rstd, long N, int C);
// Per-head RMSNorm of the q and k heads of inp (N, (NH + 2*NKV) * HD), v copied; rstd (N, NH+NKV).
template <typename T>
void qk_norm_forward(Context& ctx, T* out, float* rstd, const T* inp, const T* qw, const T* kw, long N,
                     int NH, int NKV, int HD, float eps);
// dinp (may alias dout) overwritten; dqw, dkw (HD) accumulate, deterministically.
template <typename T>
void qk_norm_backward(Context& ctx, T* dinp, T* dqw, T* dkw, const T* dout, const T* inp, const T* qw,
                      const T* kw, const float* rstd, long N, int NH, int NKV, int HD);

}  // namespace flotilla::cuda
