// LayerNorm over the last dimension (eps 1e-5), forward and backward.
#pragma once

namespace flotilla::cpu {

constexpr float kLayerNormEps = 1e-5f;

// out (N, C) = (inp - mean) * rstd * weight + bias; mean, rstd (N) are kept for backward.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, long N, int C);

// dinp (N, C) += d/dinp; dweight, dbias (C) += their gradients (all accumulate).
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, long N, int C);

}  // namespace flotilla::cpu
