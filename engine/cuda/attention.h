// Causal grouped-query attention on the GPU (flash-attention style); CPU twin: engine/cpu/attention.h.
// Same layouts: qkv (B, T, (NH + 2*NKV) * HD) = per token [q heads | k heads | v heads], query head
// h reading K/V head h / (NH / NKV); out (B, T, NH*HD); lse (B, NH, T) fp32; pos (B, T) or null:
// query t sees keys t - pos[t] .. t (packed documents), else 0 .. t. Head sizes 8, 16, 32, 64 and 128.
#pragma once

#include <cstdint>

#include "engine/cuda/context.h"

namespace flotilla::cuda {

// out = softmax(Q K^T / sqrt(HD), causal) V, without ever storing the (T, T) scores.
template <typename T>
void attention_forward(Context& ctx, T* out, float* lse, const T* qkv, const int32_t* pos, int B, int Tn,
                       int NH, int NKV, int HD);
// dqkv overwritten with the gradient for dout; scores are recomputed tile by tile. Deterministic:
// dQ and dK/dV are each produced by the one thread that owns the row (no atomics); a K/V row's
// gradient sums its group's query heads in head order.
template <typename T>
void attention_backward(Context& ctx, T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse,
                        const int32_t* pos, int B, int Tn, int NH, int NKV, int HD);

// Inference against a KV cache (attention_cached.cu): kcache, vcache (rows, max_len, NKV*HD). The new
// tokens' k and v are written to cache row row0 + b at position pos[b*Tn + t] (pos in device memory),
// then query (b, t) attends over positions 0 .. pos[b*Tn + t] of that row. No lse, no backward.
template <typename T>
void attention_cached_forward(Context& ctx, T* out, const T* qkv, T* kcache, T* vcache, const int32_t* pos,
                              int row0, int B, int Tn, int NH, int NKV, int HD, int max_len);

}  // namespace flotilla::cuda
