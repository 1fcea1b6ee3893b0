// LoRA's adapter-path kernels on the GPU; CPU twin: engine/cpu/lora.h (same semantics, and the
// same dropout masks bit for bit: engine/core/lora_mask.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/cuda/context.h"

namespace flotilla::cuda {

// y[r, col0 + j] += scale * x[r, j] (fp32 arithmetic, stored as T).
template <typename T>
void add_scaled_cols(Context& ctx, T* y, int ldy, int col0, const T* x, long N, int n, float scale);
// out[r, j] = scale * y[r, col0 + j].
template <typename T>
void scaled_cols(Context& ctx, T* out, const T* y, int ldy, int col0, long N, int n, float scale);
// out[r, j] = in[r, j] * keep / (1 - p), mask index r * ld + col0 + j (out may alias in).
template <typename T>
void dropout(Context& ctx, T* out, const T* in, long N, int n, float p, uint64_t key, int ld, int col0);

}  // namespace flotilla::cuda
