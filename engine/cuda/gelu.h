// GELU (tanh approximation) on the GPU; CPU twin: engine/cpu/gelu.h. T is float or bf16
// (storage type; arithmetic is fp32).
#pragma once

#include <cstddef>

#include "engine/cuda/context.h"

namespace flotilla::cuda {

// out (n) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <typename T>
void gelu_forward(Context& ctx, T* out, const T* inp, size_t n);

// dinp (n) = gelu'(inp) * dout; dinp may alias dout.
template <typename T>
void gelu_backward(Context& ctx, T* dinp, const T* inp, const T* dout, size_t n);

}  // namespace flotilla::cuda
