// Token + position embedding on the GPU; CPU twin: engine/cpu/encoder.h.
#pragma once

#include <cstdint>

#include "engine/cuda/context.h"

namespace flotilla::cuda {

// out (B, T, C) = wte[inp[b, t]] + wpe[pos[b, t]] (pos null: t); inp, pos (B, T) in device memory.
// Tensor parallelism: an id < 0 contributes 0 for wte (another rank holds the row), and
// wpe == nullptr contributes 0 (also llama, which has no position table).
template <typename T>
void encoder_forward(Context& ctx, T* out, const int32_t* inp, const T* wte, const T* wpe, const int32_t* pos,
                     int B, int Tn, int C);
// dwte (Vp, C) += scatter of dout rows by token; dwpe (maxT, C) += sum of the rows at each
// position. Deterministic: no float atomics (see encoder.cu). Ids < 0 are skipped for dwte; dwpe
// may be null.
template <typename T>
void encoder_backward(Context& ctx, T* dwte, T* dwpe, const T* dout, const int32_t* inp, const int32_t* pos,
                      int B, int Tn, int C);

}  // namespace flotilla::cuda
