// Fused softmax + cross-entropy over the vocabulary (llm.c's "fused classifier").
#pragma once

#include <cstdint>

namespace flotilla::cpu {

// For each of the N rows of logits (N, Vp): lse[r] = log sum_{j<V} exp(logits[r, j]) and
// losses[r] = lse[r] - logits[r, targets[r]]. Columns V..Vp-1 (vocab padding) are ignored.
// The probabilities are never materialised.
void softmax_crossentropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                                  long N, int V, int Vp);

// dlogits (N, Vp) = dloss * (softmax(logits) - onehot(target)) on columns < V, 0 on the padding.
// dlogits may alias logits (the model overwrites its logits in place).
void softmax_crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                                   const int32_t* targets, float dloss, long N, int V, int Vp);

}  // namespace flotilla::cpu
