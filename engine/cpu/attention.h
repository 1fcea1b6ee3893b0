// Causal grouped-query self-attention (the attention core: softmax(Q K^T / sqrt(HD)) V).
#pragma once

#include <cstddef>
#include <cstdint>

namespace flotilla::cpu {

// qkv (B, T, (NH + 2*NKV) * HD): per token [q heads | k heads | v heads], head h at columns h*HD
// of its part; query head h attends with K/V head h / (NH / NKV) (GPT-2: NKV = NH).
// out (B, T, NH*HD): heads concatenated. lse (B, NH, T): log-sum-exp of each query's scaled
// scores, the only per-row state backward needs (no (B, NH, T, T) attention matrix is stored).
// pos (B, T) or nullptr: query t of a row sees keys t - pos[t] .. t (documents packed in a row,
// pos counting from each document's start); nullptr sees keys 0 .. t.
void attention_forward(float* out, float* lse, const float* qkv, const int32_t* pos, int B, int T, int NH,
                       int NKV, int HD);
// dqkv is overwritten with the gradient for dout, given the forward's qkv, out and lse. Scores
// and probabilities are recomputed block by block; each K/V head's gradient sums its group's
// query heads in head order (deterministic).
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        const int32_t* pos, int B, int T, int NH, int NKV, int HD);
// Inference against a KV cache (Backend::attention_cached_forward): kcache, vcache (rows, max_len,
// NKV*HD). The new tokens' k and v (from qkv, as above) are written to cache row row0 + b at
// position pos[b*T + t]; then query (b, t) attends over positions 0 .. pos[b*T + t] of that row.
// Tasks are (row, query head) pairs as in the forward; a decode step (T = 1) is one gemv each.
void attention_cached_forward(float* out, const float* qkv, float* kcache, float* vcache, const int32_t* pos,
                              int row0, int B, int T, int NH, int NKV, int HD, int max_len);
// Query rows per block and key rows per tile (engine/cpu/attention.cpp). Blocks are 64 rows below
// T = kAttentionLongT and 128 from there (attention_query_block): fewer, larger sgemm calls where the
// diagonal's masked half is a small part of the work. The scratch per thread is
// attention_scratch_floats(backward, T) floats: at most 2 x 128 x 256 + 128 (256.5 KiB) whatever T is.
// (The KV-cached forward of a decode step, T <= 8 new tokens, takes its keys as one tile: T x max_len.)
constexpr int kAttentionQueryBlock = 64;
constexpr int kAttentionLongT = 2048;
constexpr int kAttentionKeyTile = 256;
inline int attention_query_block(int T) {
  return T >= kAttentionLongT ? 2 * kAttentionQueryBlock : kAttentionQueryBlock;
}
size_t attention_scratch_floats(bool backward, int T);

// The calling thread's attention scratch, grown to `floats` on demand and kept for the thread's
// life; the largest request any thread made since the last reset, in bytes (tests check it does
// not grow with T).
float* attention_thread_scratch(size_t floats);
size_t attention_scratch_high_water_bytes();
void reset_attention_scratch_high_water();

// The kernels before the flash-style rewrite (attention_reference.cpp): a 64-query block against all
// its keys at once, 2 x 64 x T floats of scratch per thread. Only for tests and bench-attention.
namespace reference {
void attention_forward(float* out, float* lse, const float* qkv, const int32_t* pos, int B, int T, int NH,
                       int NKV, int HD);
void attention_backward(float* dqkv, const float* dout, const float* qkv, const float* out, const float* lse,
                        const int32_t* pos, int B, int T, int NH, int NKV, int HD);
}  // namespace reference

}  // namespace flotilla::cpu
