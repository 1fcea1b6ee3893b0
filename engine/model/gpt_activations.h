// The activation arena of GptModel: which tensors forward keeps for backward, and the scratch
// backward needs, laid out in one buffer (documented next to activation_floats() in gpt.h).
// A shard (tensor/pipeline parallel) keeps the same tensors with its local widths: Ca = C/tp
// attention columns, NH/tp heads, F = 4C/tp MLP columns, Vp/tp logit columns on the last stage
// only, and its own layers; `encoded` then holds the stage's input activation.
//
// Recomputation (train.recompute): only the block outputs residual3 (each block's input is the
// previous block's output, or `encoded`) stay per layer in the slot's arena; the other eleven
// per-layer tensors shrink to one layer each and live in a separate "block" region that
// GptModel shares between its activation slots and rebuilds block by block during backward.
// Their accessors then ignore the layer index (layer stride 0).
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/model/gpt.h"
#include "engine/model/gpt_shard.h"

namespace flotilla {

struct GptActivations {
  // Per-layer stacks (index with the accessors below); N = B*T. Under recomputation all but
  // residual3_ hold one layer (in the shared block region) and `ks` is 0.
  float* ln1_ = nullptr;        // (L, N, C)
  float* ln1_mean_ = nullptr;   // (L, N)
  float* ln1_rstd_ = nullptr;   // (L, N)
  float* qkv_ = nullptr;        // (L, N, 3Ca)
  float* atty_ = nullptr;       // (L, N, Ca)  attention output, heads concatenated
  float* att_lse_ = nullptr;    // (L, B, NH, T) attention log-sum-exp per query
  float* residual2_ = nullptr;  // (L, N, C)   residual + attention branch
  float* ln2_ = nullptr;        // (L, N, C)
  float* ln2_mean_ = nullptr;   // (L, N)
  float* ln2_rstd_ = nullptr;   // (L, N)
  float* fch_ = nullptr;        // (L, N, F)   MLP pre-activation (GELU input)
  float* residual3_ = nullptr;  // (L, N, C)   residual2 + MLP branch: the block output
  // Kept once.
  float* encoded = nullptr;       // (N, C)   token + position embedding
  float* lnf = nullptr;           // (N, C)
  float* lnf_mean = nullptr;      // (N)
  float* lnf_rstd = nullptr;      // (N)
  float* logits = nullptr;        // (N, Vp)  dlogits after backward
  float* losses = nullptr;        // (N)
  float* loss_lse = nullptr;      // (N)      log-sum-exp of each row of logits
  int32_t* input_ids = nullptr;   // (N)
  int32_t* target_ids = nullptr;  // (N)
  // Scratch.
  float* gelu = nullptr;       // (N, F)   GELU output of one layer
  float* proj = nullptr;       // (N, C)   attproj/fcproj output; d atty (N, Ca) in backward
  float* dresidual = nullptr;  // (N, C)
  float* dln = nullptr;        // (N, C)   gradient into a LayerNorm output
  float* dbig = nullptr;       // (N, F)   d fch; or d qkv as (N, 3Ca) in its first 3*N*Ca floats

  size_t nc = 0, n = 0, lse_per_layer = 0;  // strides: N*C, N, B*NH*T
  size_t nca = 0, nf = 0;                   // strides: N*Ca, N*F
  size_t ks = 1;                            // 1: one copy per layer; 0: recomputed (one block)

  float* ln1(int l) const { return ln1_ + ks * l * nc; }
  float* ln1_mean(int l) const { return ln1_mean_ + ks * l * n; }
  float* ln1_rstd(int l) const { return ln1_rstd_ + ks * l * n; }
  float* qkv(int l) const { return qkv_ + ks * l * 3 * nca; }
  float* atty(int l) const { return atty_ + ks * l * nca; }
  float* att_lse(int l) const { return att_lse_ + ks * l * lse_per_layer; }
  float* residual2(int l) const { return residual2_ + ks * l * nc; }
  float* ln2(int l) const { return ln2_ + ks * l * nc; }
  float* ln2_mean(int l) const { return ln2_mean_ + ks * l * n; }
  float* ln2_rstd(int l) const { return ln2_rstd_ + ks * l * n; }
  float* fch(int l) const { return fch_ + ks * l * nf; }
  float* residual3(int l) const { return residual3_ + l * nc; }
};

// Floats of one activation slot's arena and of the block region (0 without recomputation).
struct ActivationSizes {
  size_t arena = 0;
  size_t block = 0;
  size_t total() const { return arena + block; }
};
ActivationSizes activation_sizes(const GptDims& d, const GptShard& s, int B, int T, bool recompute);

// Floats the arena needs for (d, B, T) without recomputation; equals activation_floats(d, B, T).
size_t activation_arena_floats(const GptDims& d, int B, int T);
// The same for one shard (gpt_shard.h); equal to the above for a whole model.
size_t activation_arena_floats(const GptDims& d, const GptShard& s, int B, int T);

// Pointers into an arena of at least activation_sizes(...).arena floats and, with recomputation,
// a block region of at least activation_sizes(...).block floats (ignored without).
GptActivations layout_activations(const GptDims& d, const GptShard& s, int B, int T, float* base,
                                  bool recompute = false, float* block_base = nullptr);

}  // namespace flotilla
