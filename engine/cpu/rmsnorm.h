// RMSNorm (Llama family) and its per-head variant for q and k (Qwen 3's q_norm / k_norm).
#pragma once

#include <cstdint>

namespace flotilla::cpu {

// out (N, C) = inp * rstd * weight with rstd (N) = 1 / sqrt(mean(inp^2) + eps), all in fp32
// (Hugging Face's LlamaRMSNorm order: normalise, then scale by the weight).
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, long N, int C,
                     float eps);
// dinp (N, C) += d/dinp; dweight (C) += sum over rows of dout * inp * rstd (column sums in row
// order: bit-identical for any thread count).
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, long N, int C);

// Per-head RMSNorm of q and k. inp/out (N, (NH + 2*NKV) * HD) in attention's [q | k | v] layout:
// each of the NH q heads is normalised over its HD values and scaled by qw (HD), each k head by kw;
// the v part is copied. rstd (N, NH + NKV).
void qk_norm_forward(float* out, float* rstd, const float* inp, const float* qw, const float* kw, long N,
                     int NH, int NKV, int HD, float eps);
// dinp (same layout; may alias dout) is overwritten: the q and k parts with the norm's input
// gradient, the v part copied from dout; dqw, dkw (HD) accumulate.
void qk_norm_backward(float* dinp, float* dqw, float* dkw, const float* dout, const float* inp,
                      const float* qw, const float* kw, const float* rstd, long N, int NH, int NKV, int HD);

}  // namespace flotilla::cpu
