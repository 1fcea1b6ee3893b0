// Residual add on the GPU; CPU twin: engine/cpu/residual.h.
#pragma once

#include <cstddef>

#include "engine/cuda/context.h"

namespace flotilla::cuda {

// out (n) = a + b; out may alias a or b.
template <typename T>
void residual_forward(Context& ctx, T* out, const T* a, const T* b, size_t n);

// g (n) *= s (fp32; used by gradient clipping).
void scale_values(Context& ctx, float* g, size_t n, float s);

// Conversions between fp32 and bf16 buffers of n values (round to nearest even).
void convert(Context& ctx, bf16* out, const float* in, size_t n);
void convert(Context& ctx, float* out, const bf16* in, size_t n);

}  // namespace flotilla::cuda
