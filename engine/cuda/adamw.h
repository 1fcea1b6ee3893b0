// Fused AdamW on the GPU (PyTorch semantics); CPU twin: engine/cpu/adamw.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/cuda/context.h"

namespace flotilla::cuda {

// All fp32, exactly the CPU kernel's operation order (gradients multiplied by grad_scale as read).
void adamw_update(Context& ctx, float* params, const float* grads, float* m, float* v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int64_t t,
                  float grad_scale = 1.0f);

// Mixed precision: fp32 master weights and moments, gradients in G (float or bf16, multiplied by
// grad_scale as they are read, e.g. for clipping), and the bf16
// working copy params = round(master) written in the same pass. With seed != 0 the rounding is
// stochastic (unbiased; the random bits are a hash of (seed, t, index), so a run repeats exactly).
template <typename G>
void adamw_update_mixed(Context& ctx, bf16* params, float* master, const G* grads, float* m, float* v,
                        size_t n, float grad_scale, float lr, float beta1, float beta2, float eps,
                        float weight_decay, int64_t t, uint32_t seed);

}  // namespace flotilla::cuda
