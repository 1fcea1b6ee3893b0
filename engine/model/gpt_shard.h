// Which part of the GPT-2 model one rank holds under tensor (Megatron) and pipeline parallelism,
// and how its local parameter buffer maps onto the full llm.c layout.
//
// A shard keeps the llm.c tensor order (wte, wpe, ln1w, ... lnfb) with local sizes:
//   wte (Vp/tp, C)     vocab rows [tp_rank*Vp/tp, ...), on the first and the last stage (tied:
//                      the first stage embeds, the last projects to logits; their gradients are
//                      summed between the two stages after backward)
//   wpe (maxT, C)      first stage only, replicated over TP
//   per local layer:   ln1w/b, ln2w/b, attprojb, fcprojb replicated over TP;
//                      qkvw (3*C/tp, C) the q, k and v rows of this rank's heads (column parallel);
//                      qkvb (3*C/tp); attprojw (C, C/tp) this rank's input columns (row parallel);
//                      fcw (4C/tp, C), fcb (4C/tp) column parallel; fcprojw (C, 4C/tp) row parallel
//   lnfw, lnfb (C)     last stage only, replicated over TP
// One non-obvious decision: replicated tensors are updated on every TP rank from gradients that
// are bitwise identical there (their inputs are replicated after the f/g all-reduces), so they
// never need their own all-reduce; the gradient norm counts them on TP rank 0 only.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "engine/model/gpt.h"  // GptDims, ParamIndex (gpt.h only forward-declares GptShard)

namespace flotilla {

struct GptShard {
  int tp = 1, tp_rank = 0;  // tensor-parallel degree and this rank's index
  int pp = 1, stage = 0;    // pipeline stages and this rank's stage
  int layer_begin = 0;      // first global layer of this stage
  int layer_end = -1;       // one past the last; -1 = n_layer (resolved by resolve_shard)

  bool first_stage() const { return stage == 0; }
  bool last_stage() const { return stage == pp - 1; }
  bool has_wte() const { return first_stage() || last_stage(); }
  int local_layers() const { return layer_end - layer_begin; }
  bool whole() const { return tp == 1 && pp == 1; }
  std::string describe() const;  // "tp rank 1 of 2, stage 0 of 2 (layers 0-1)"
};

// Layers [begin, end) of `stage` among `pp` stages: contiguous and balanced (the first
// n_layer % pp stages get one more, as the planner's stage_layers() counts).
std::pair<int, int> stage_layer_range(int n_layer, int pp, int stage);

// A shard with its layer range filled in; throws Error(kConfig) when tp does not divide n_head
// or the padded vocabulary, or pp exceeds n_layer (validate() reports these first).
GptShard make_shard(const GptDims& d, int tp, int tp_rank, int pp, int stage);
GptShard resolve_shard(const GptDims& d, GptShard s);  // layer_end = -1 -> n_layer, checked

std::array<size_t, kNumParamTensors> local_param_sizes(const GptDims& d, const GptShard& s);

// A contiguous run of one tensor: `count` floats at `full` inside the full tensor and at `local`
// inside the shard's tensor (both relative to the tensor's start).
struct ShardRun {
  size_t full = 0, local = 0, count = 0;
};
std::vector<ShardRun> shard_runs(const GptDims& d, const GptShard& s, int tensor);

// Copies between a full llm.c parameter vector (num_parameters(d) floats) and a shard's local
// vector (sum of local_param_sizes).
void full_to_shard(const GptDims& d, const GptShard& s, const float* full, float* local);
void shard_to_full(const GptDims& d, const GptShard& s, const float* local, float* full);

// Whether tensor `tensor` of this shard counts toward the global gradient norm (and the reported
// parameter count): replicated-over-TP tensors on TP rank 0 only, the tied wte on the first stage.
bool counts_once(const GptShard& s, int tensor);
// Tensors replicated over the TP group (identical on every TP rank).
bool replicated_over_tp(int tensor);

}  // namespace flotilla
