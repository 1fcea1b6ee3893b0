// The parameter tensors of an architecture as data: names, shapes, weight decay, which pipeline
// stages hold them and how tensor parallelism splits them (DESIGN.md §3, docs/checkpoints.md).
//
// A model's parameters are one flat vector: the tensors in table order, each per-layer tensor
// stored for all layers together, (L, rows, cols) row-major, like llm.c's layout (so GPT-2
// checkpoints, llm.c .bin files and safetensors conversion stay plain copies). Gradients mirror it.
// Non-obvious decision: the table is the only description of a layout. Sizes, offsets, shard
// slices (shard_runs), the gradient-norm bookkeeping (counts_once), data-parallel buckets and
// checkpoint gathering are computed from it, for every architecture, so a new architecture is a
// new table plus its forward and backward, never a new copy of the sharding or optimizer code.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "engine/model/model_dims.h"

namespace flotilla {

struct ModelShard;
struct LoraSpec;

// How tensor parallelism splits a tensor across the TP group.
enum class TpSplit {
  kReplicated,  // every TP rank holds all of it
  kRows,        // each row section is split into tp contiguous parts (column-parallel outputs:
                // q/k/v heads, MLP-up, vocabulary rows)
  kCols,        // every row keeps its own 1/tp of the columns (row-parallel inputs)
};

// Which pipeline stages hold a tensor.
enum class Holder {
  kLayers,             // one slice per layer; a stage holds its own layers
  kFirstStage,         // embeddings
  kLastStage,          // final norm, untied LM head
  kFirstAndLastStage,  // the tied token embedding (first embeds, last projects to logits)
};

struct TensorSpec {
  std::string name;
  size_t rows = 0, cols = 1;         // one layer's (or the tensor's) shape; cols = 1 for vectors
  std::vector<size_t> row_sections;  // kRows: row counts of the sections, summing to rows
  TpSplit split = TpSplit::kReplicated;
  Holder holder = Holder::kLayers;
  bool decays = false;  // AdamW weight decay applies (2-D weights and embeddings)

  bool per_layer() const { return holder == Holder::kLayers; }
  size_t per_layer_floats() const { return rows * cols; }
};

class ParamLayout {
 public:
  explicit ParamLayout(const ModelDims& dims);  // the table of dims.arch
  // The LoRA adapters' table of a model of dims `dims` (lora.h lora_table): what a LoRA model
  // trains, with no embedding or head.
  ParamLayout(const ModelDims& dims, const LoraSpec& lora);

  const ModelDims& dims() const { return d_; }
  int size() const { return static_cast<int>(t_.size()); }
  const TensorSpec& operator[](int i) const { return t_[static_cast<size_t>(i)]; }
  int find(const std::string& name) const;  // -1 when absent
  // The token embedding is tensor 0 in every architecture's table; an adapter table has none (-1).
  int embedding() const { return adapters_ ? -1 : 0; }
  int head() const { return head_; }  // the tensor the logits are projected with (-1: adapters)
  bool tied() const { return head_ == 0; }
  bool adapters() const { return adapters_; }  // a LoRA adapter table

  // The whole model's floats of tensor i / of all tensors (with the padded vocabulary).
  size_t full_size(int i) const;
  size_t full_params() const;
  // What users are told: the real vocabulary's rows only.
  size_t full_params_unpadded() const;

 private:
  ModelDims d_;
  std::vector<TensorSpec> t_;
  int head_ = 0;
  bool adapters_ = false;
};

// A contiguous run of one tensor: `count` floats at `full` inside the whole tensor and at `local`
// inside the shard's tensor (both relative to the tensor's start).
struct ShardRun {
  size_t full = 0, local = 0, count = 0;
};
std::vector<ShardRun> shard_runs(const ParamLayout& layout, const ModelShard& s, int tensor);
// Floats of `tensor` that rank `s` holds (the sum of its shard_runs), computed without building them.
size_t local_size(const ParamLayout& layout, const ModelShard& s, int tensor);
std::vector<size_t> local_param_sizes(const ParamLayout& layout, const ModelShard& s);

// Copies between a full parameter vector (full_params() floats) and a shard's local vector.
void full_to_shard(const ParamLayout& layout, const ModelShard& s, const float* full, float* local);
void shard_to_full(const ParamLayout& layout, const ModelShard& s, const float* local, float* full);

// Whether tensor i of this shard counts toward the global gradient norm (and the reported
// parameter count): replicated-over-TP tensors on TP rank 0 only, the tied embedding on the
// first stage only.
bool counts_once(const ParamLayout& layout, const ModelShard& s, int tensor);

// The same helpers for the architecture table of `d` (ParamLayout(d)), for callers that hold dims.
std::vector<ShardRun> shard_runs(const ModelDims& d, const ModelShard& s, int tensor);
std::vector<size_t> local_param_sizes(const ModelDims& d, const ModelShard& s);
void full_to_shard(const ModelDims& d, const ModelShard& s, const float* full, float* local);
void shard_to_full(const ModelDims& d, const ModelShard& s, const float* local, float* full);
bool counts_once(const ModelDims& d, const ModelShard& s, int tensor);

}  // namespace flotilla
