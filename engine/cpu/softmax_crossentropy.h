// Fused softmax + cross-entropy over the vocabulary (llm.c's "fused classifier").
#pragma once

#include <cstdint>

namespace flotilla::cpu {

// For each of the N rows of logits (N, Vp): lse[r] = log sum_{j<V} exp(logits[r, j]) and
// losses[r] = lse[r] - logits[r, targets[r]]. Columns V..Vp-1 (vocab padding) are ignored.
// targets[r] == kIgnoreTarget (-100): losses[r] = 0 (lse still computed); other targets[r] < 0:
// the target column is on another tensor-parallel rank, losses[r] = lse[r].
// The probabilities are never materialised.
void softmax_crossentropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                                  long N, int V, int Vp);
// dlogits (N, Vp) = dloss * (softmax(logits) - onehot(target)) on columns < V, 0 on the padding;
// an ignored row is all 0, a row whose target is elsewhere gets no one-hot.
// dlogits may alias logits (the model overwrites its logits in place).
void softmax_crossentropy_backward(float* dlogits, const float* logits, const float* lse,
                                   const int32_t* targets, float dloss, long N, int V, int Vp);
// out[r] = logits[r, targets[r]], or 0 when targets[r] < 0 (the vocab-parallel target logit).
void gather_target_logits(float* out, const float* logits, const int32_t* targets, long N, int Vp);

}  // namespace flotilla::cpu
