// Causal multi-head self-attention (the attention core: softmax(Q K^T / sqrt(hs)) V).
#pragma once

namespace flotilla::cpu {

// qkv (B, T, 3C): per token [q | k | v], head h at columns h*hs within each part (hs = C / NH).
// out (B, T, C): heads concatenated. lse (B, NH, T): log-sum-exp of each query's scaled scores,
// the only per-row state backward needs (no (B, NH, T, T) attention matrix is stored).
void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH);

// dqkv (B, T, 3C) is overwritten with the gradient for dout (B, T, C), given the forward's qkv,
// out and lse. Scores and probabilities are recomputed block by block.
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        int B, int T, int C, int NH);

// Query rows per block: the scratch per thread is 2 * kAttentionQueryBlock * T floats.
constexpr int kAttentionQueryBlock = 64;

}  // namespace flotilla::cpu
