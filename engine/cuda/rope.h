// Rotate-half RoPE on the GPU; CPU twin: engine/cpu/rope.h (same layout and angle rule).
#pragma once

#include <cstdint>

#include "engine/cuda/context.h"

namespace flotilla::cuda {

// In place on the q and k heads of qkv (B, T, (NH + 2*NKV) * HD): element j < HD/2 of a head pairs
// with j + HD/2, rotated by angle pos * inv_freq[j] (pos null: t); inv_freq (HD/2) fp32 on the device.
template <typename T>
void rope_forward(Context& ctx, T* qkv, const int32_t* pos, const float* inv_freq, int B, int Tn, int NH,
                  int NKV, int HD);
// The transpose (rotation by the negative angle), in place on d(q), d(k).
template <typename T>
void rope_backward(Context& ctx, T* dqkv, const int32_t* pos, const float* inv_freq, int B, int Tn, int NH,
                   int NKV, int HD);

}  // namespace flotilla::cuda
