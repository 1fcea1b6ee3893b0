// Which part of a model one rank holds under tensor (Megatron) and pipeline parallelism.
//
// A shard keeps the architecture's tensor order (param_layout.h) with local sizes: column-parallel
// tensors (q/k/v heads, MLP-up, vocabulary rows) hold 1/tp of each row section, row-parallel ones
// (attention-out, MLP-down) 1/tp of every row's columns, replicated tensors all of it; a pipeline
// stage holds its own layers, the embeddings on the first stage and the final norm (and an untied
// LM head) on the last; a tied embedding lives on both, and its gradients are summed between them.
// One non-obvious decision: replicated tensors are updated on every TP rank from gradients that
// are bitwise identical there (their inputs are replicated after the all-reduces), so they never
// need their own all-reduce; the gradient norm counts them on TP rank 0 only (counts_once).
#pragma once

#include <string>
#include <utility>

#include "engine/model/model_dims.h"

namespace flotilla {

struct ModelShard {
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

// The TP problem of these dims, or "": tp must divide n_head, the padded vocabulary and, for
// llama, n_kv_head and ffn_dim (validate() reports the same, with both numbers).
std::string tp_problem(const ModelDims& d, int tp);

// A shard with its layer range filled in; throws Error(kConfig) when tp_problem() is not empty or
// pp exceeds n_layer (validate() reports these first).
ModelShard make_shard(const ModelDims& d, int tp, int tp_rank, int pp, int stage);
ModelShard resolve_shard(const ModelDims& d, ModelShard s);  // layer_end = -1 -> n_layer, checked

}  // namespace flotilla
