// Fused softmax + cross-entropy on the GPU; CPU twin: engine/cpu/softmax_crossentropy.h.
// Logits are T (float or bf16); losses and lse are fp32.
#pragma once

#include <cstdint>

#include "engine/cuda/context.h"

namespace flotilla::cuda {

// lse[r] = log sum_{j<V} exp(logits[r, j]); losses[r] = lse[r] - logits[r, targets[r]].
// targets[r] == -100 (kIgnoreTarget): losses[r] = 0 and the backward row is 0. Tensor parallelism
// (a slice of the vocabulary): other targets[r] < 0 mean another rank holds the target column;
// losses[r] = lse[r] then, and the backward subtracts no one-hot on that row.
template <typename T>
void softmax_crossentropy_forward(Context& ctx, float* losses, float* lse, const T* logits,
                                  const int32_t* targets, long N, int V, int Vp);

// dlogits (N, Vp) = dloss * (softmax - onehot) on columns < V, 0 on padding; may alias logits.
template <typename T>
void softmax_crossentropy_backward(Context& ctx, T* dlogits, const T* logits, const float* lse,
                                   const int32_t* targets, float dloss, long N, int V, int Vp);

// out[r] = logits[r, targets[r]] (fp32), 0 where targets[r] < 0: the target logit of a
// vocab-parallel cross-entropy, summed over the TP ranks.
template <typename T>
void gather_target_logits(Context& ctx, float* out, const T* logits, const int32_t* targets, long N, int Vp);
// sum of losses (N) in double, deterministic, copied to the host (synchronises the stream).
double sum_losses(Context& ctx, const float* losses, long N);

}  // namespace flotilla::cuda
