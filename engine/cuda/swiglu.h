// SwiGLU on the GPU; CPU twin: engine/cpu/swiglu.h. inp (N, 2F) = [gate | up] per row.
#pragma once

#include "engine/cuda/context.h"

namespace flotilla::cuda {

// out (N, F) = silu(gate) * up.
template <typename T>
void swiglu_forward(Context& ctx, T* out, const T* inp, long N, int F);
// dinp (N, 2F) = [d(gate) | d(up)] for dout (N, F).
template <typename T>
void swiglu_backward(Context& ctx, T* dinp, const T* dout, const T* inp, long N, int F);

}  // namespace flotilla::cuda
