// Causal multi-head attention on the GPU (flash-attention style); CPU twin: engine/cpu/attention.h.
// Same layouts: qkv (B, T, 3C) with head h at columns h*hs of each part, out (B, T, C),
// lse (B, NH, T) fp32. Head sizes 32, 64 and 128 are supported.
#pragma once

#include "engine/cuda/context.h"

namespace flotilla::cuda {

// out = softmax(Q K^T / sqrt(hs), causal) V, without ever storing the (T, T) scores.
template <typename T>
void attention_forward(Context& ctx, T* out, float* lse, const T* qkv, int B, int Tn, int C, int NH);

// dqkv (B, T, 3C) overwritten with the gradient for dout; scores are recomputed tile by tile.
// Deterministic: dQ and dK/dV are each produced by the one thread that owns the row (no atomics).
template <typename T>
void attention_backward(Context& ctx, T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse, int B,
                        int Tn, int C, int NH);

}  // namespace flotilla::cuda
