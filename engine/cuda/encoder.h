// Token + position embedding on the GPU; CPU twin: engine/cpu/encoder.h.
#pragma once

#include <cstdint>

#include "engine/cuda/context.h"

namespace flotilla::cuda {

// out (B, T, C) = wte[inp[b, t]] + wpe[t]; inp (B, T) in device memory. Tensor parallelism: an id
// < 0 contributes 0 for wte (another rank holds the row), and wpe == nullptr contributes 0.
template <typename T>
void encoder_forward(Context& ctx, T* out, const int32_t* inp, const T* wte, const T* wpe, int B, int Tn, int C);

// dwte (Vp, C) += scatter of dout rows by token; dwpe (maxT, C) += sum over b of dout[b, t].
// Deterministic: no float atomics (see encoder.cu). Ids < 0 are skipped for dwte; dwpe may be null.
template <typename T>
void encoder_backward(Context& ctx, T* dwte, T* dwpe, const T* dout, const int32_t* inp, int B, int Tn, int C);

}  // namespace flotilla::cuda
