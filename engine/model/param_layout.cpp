// The two architecture tables and the shard geometry computed from them.
//
// Non-obvious decision: a table row exists for every tensor an architecture can have, with zero
// rows where this config does not have it (no q/k/v bias, no q/k norm, a tied head), so tensor
// indices are the same for every model of one architecture (the enums in gpt.h and llama.h name
// them) and zero-sized tensors cost nothing anywhere.
#include "engine/model/param_layout.h"

#include <cstring>

#include "engine/core/error.h"
#include "engine/model/gpt.h"
#include "engine/model/llama.h"
#include "engine/model/lora.h"
#include "engine/model/model_shard.h"

namespace flotilla {
namespace {

TensorSpec tensor(const char* name, size_t rows, size_t cols, TpSplit split, Holder holder, bool decays,
                  std::vector<size_t> sections = {}) {
  TensorSpec t;
  t.name = name;
  t.rows = rows;
  t.cols = cols;
  t.split = split;
  t.holder = holder;
  t.decays = decays;
  t.row_sections = sections.empty() ? std::vector<size_t>{rows} : std::move(sections);
  return t;
}

// GPT-2 in llm.c's order (gpt.h ParamIndex).
std::vector<TensorSpec> gpt2_table(const ModelDims& d) {
  const size_t C = static_cast<size_t>(d.n_embd), Vp = static_cast<size_t>(d.padded_vocab);
  const size_t maxT = static_cast<size_t>(d.max_seq_len);
  using S = TpSplit;
  using H = Holder;
  return {
      tensor("wte", Vp, C, S::kRows, H::kFirstAndLastStage, true),
      tensor("wpe", maxT, C, S::kReplicated, H::kFirstStage, true),
      tensor("ln1w", C, 1, S::kReplicated, H::kLayers, false),
      tensor("ln1b", C, 1, S::kReplicated, H::kLayers, false),
      tensor("qkvw", 3 * C, C, S::kRows, H::kLayers, true, {C, C, C}),
      tensor("qkvb", 3 * C, 1, S::kRows, H::kLayers, false, {C, C, C}),
      tensor("attprojw", C, C, S::kCols, H::kLayers, true),
      tensor("attprojb", C, 1, S::kReplicated, H::kLayers, false),
      tensor("ln2w", C, 1, S::kReplicated, H::kLayers, false),
      tensor("ln2b", C, 1, S::kReplicated, H::kLayers, false),
      tensor("fcw", 4 * C, C, S::kRows, H::kLayers, true),
      tensor("fcb", 4 * C, 1, S::kRows, H::kLayers, false),
      tensor("fcprojw", C, 4 * C, S::kCols, H::kLayers, true),
      tensor("fcprojb", C, 1, S::kReplicated, H::kLayers, false),
      tensor("lnfw", C, 1, S::kReplicated, H::kLastStage, false),
      tensor("lnfb", C, 1, S::kReplicated, H::kLastStage, false),
  };
}

// The Llama family (llama.h LlamaParam): q, k, v fused into one projection ([q | k | v] rows), gate
// and up fused into one ([gate | up] rows), so each is one matmul and one column-parallel split.
std::vector<TensorSpec> llama_table(const ModelDims& d) {
  const size_t C = static_cast<size_t>(d.n_embd), Vp = static_cast<size_t>(d.padded_vocab);
  const size_t Q = static_cast<size_t>(d.q_dim()), KV = static_cast<size_t>(d.kv_dim());
  const size_t F = static_cast<size_t>(d.ffn()), hd = static_cast<size_t>(d.hd());
  const size_t bias = d.qkv_bias ? 1 : 0, norm = d.qk_norm ? 1 : 0, head = d.tied_embeddings ? 0 : 1;
  using S = TpSplit;
  using H = Holder;
  return {
      tensor("embed", Vp, C, S::kRows, d.tied_embeddings ? H::kFirstAndLastStage : H::kFirstStage, true),
      tensor("attn_norm", C, 1, S::kReplicated, H::kLayers, false),
      tensor("qkv", Q + 2 * KV, C, S::kRows, H::kLayers, true, {Q, KV, KV}),
      tensor("qkv_bias", bias * (Q + 2 * KV), 1, S::kRows, H::kLayers, false,
             {bias * Q, bias * KV, bias * KV}),
      tensor("q_norm", norm * hd, 1, S::kReplicated, H::kLayers, false),
      tensor("k_norm", norm * hd, 1, S::kReplicated, H::kLayers, false),
      tensor("attn_out", C, Q, S::kCols, H::kLayers, true),
      tensor("mlp_norm", C, 1, S::kReplicated, H::kLayers, false),
      tensor("gate_up", 2 * F, C, S::kRows, H::kLayers, true, {F, F}),
      tensor("down", C, F, S::kCols, H::kLayers, true),
      tensor("final_norm", C, 1, S::kReplicated, H::kLastStage, false),
      tensor("lm_head", head * Vp, C, S::kRows, H::kLastStage, true),
  };
}

}  // namespace

ParamLayout::ParamLayout(const ModelDims& dims) : d_(dims) {
  if (dims.llama()) {
    t_ = llama_table(dims);
    head_ = dims.tied_embeddings ? 0 : llama::kLmHead;
  } else {
    t_ = gpt2_table(dims);
    head_ = 0;
  }
}

ParamLayout::ParamLayout(const ModelDims& dims, const LoraSpec& lora)
    : d_(dims), t_(lora_table(dims, lora)), head_(-1), adapters_(true) {}

int ParamLayout::find(const std::string& name) const {
  for (size_t i = 0; i < t_.size(); ++i)
    if (t_[i].name == name) return static_cast<int>(i);
  return -1;
}

size_t ParamLayout::full_size(int i) const {
  const TensorSpec& t = (*this)[i];
  return t.per_layer_floats() * (t.per_layer() ? static_cast<size_t>(d_.n_layer) : 1);
}

size_t ParamLayout::full_params() const {
  size_t n = 0;
  for (int i = 0; i < size(); ++i) n += full_size(i);
  return n;
}

size_t ParamLayout::full_params_unpadded() const {
  if (adapters_) return full_params();
  const size_t pad_rows = static_cast<size_t>(d_.padded_vocab - d_.vocab_size);
  const size_t C = static_cast<size_t>(d_.n_embd);
  return full_params() - pad_rows * C * (tied() ? 1 : 2);
}

namespace {

bool holds(const TensorSpec& t, const ModelShard& s) {
  return t.holder == Holder::kLayers || (t.holder == Holder::kFirstStage && s.first_stage()) ||
         (t.holder == Holder::kLastStage && s.last_stage()) ||
         (t.holder == Holder::kFirstAndLastStage && s.has_wte());
}

// Appends a run, merged into the previous one where both are contiguous in the full and the local
// vector (a whole tensor with tp = 1 is one run, not one per row per layer).
void push_run(std::vector<ShardRun>& runs, ShardRun r) {
  if (!runs.empty()) {
    ShardRun& last = runs.back();
    if (last.full + last.count == r.full && last.local + last.count == r.local) {
      last.count += r.count;
      return;
    }
  }
  runs.push_back(r);
}

}  // namespace

size_t local_size(const ParamLayout& layout, const ModelShard& s, int tensor) {
  const TensorSpec& t = layout[tensor];
  if (t.rows == 0 || !holds(t, s)) return 0;
  const size_t tp = static_cast<size_t>(s.tp);
  size_t per = 0;
  switch (t.split) {
    case TpSplit::kReplicated:
      per = t.rows * t.cols;
      break;
    case TpSplit::kRows:
      for (size_t sec : t.row_sections) per += (sec / tp) * t.cols;
      break;
    case TpSplit::kCols:
      per = t.rows * (t.cols / tp);
      break;
  }
  return t.per_layer() ? per * static_cast<size_t>(s.local_layers()) : per;
}

std::vector<ShardRun> shard_runs(const ParamLayout& layout, const ModelShard& s, int tensor) {
  const TensorSpec& t = layout[tensor];
  std::vector<ShardRun> runs;
  if (t.rows == 0 || !holds(t, s)) return runs;
  const size_t tp = static_cast<size_t>(s.tp), r = static_cast<size_t>(s.tp_rank);
  // The runs of one layer (or of the whole non-layer tensor).
  std::vector<ShardRun> within;
  size_t local_per = 0;
  switch (t.split) {
    case TpSplit::kReplicated:
      within.push_back({0, 0, t.rows * t.cols});
      local_per = t.rows * t.cols;
      break;
    case TpSplit::kRows: {
      size_t full_row = 0, local_row = 0;
      for (size_t sec : t.row_sections) {
        const size_t part = sec / tp;
        if (part > 0) within.push_back({(full_row + r * part) * t.cols, local_row * t.cols, part * t.cols});
        full_row += sec;
        local_row += part;
      }
      local_per = local_row * t.cols;
      break;
    }
    case TpSplit::kCols: {
      const size_t part = t.cols / tp;
      for (size_t row = 0; row < t.rows; ++row) push_run(within, {row * t.cols + r * part, row * part, part});
      local_per = t.rows * part;
      break;
    }
  }
  if (!t.per_layer()) return within;
  const size_t full_per = t.rows * t.cols, lb = static_cast<size_t>(s.layer_begin);
  const size_t nl = static_cast<size_t>(s.local_layers());
  for (size_t l = 0; l < nl; ++l)
    for (const ShardRun& w : within)
      push_run(runs, {(lb + l) * full_per + w.full, l * local_per + w.local, w.count});
  return runs;
}

// In closed form: the planner asks this of configs with a million layers or n_embd = 2^30 before
// anything is allocated, so it must not build the runs (RELIABILITY A8).
std::vector<size_t> local_param_sizes(const ParamLayout& layout, const ModelShard& s) {
  std::vector<size_t> out(static_cast<size_t>(layout.size()), 0);
  for (int i = 0; i < layout.size(); ++i) out[static_cast<size_t>(i)] = local_size(layout, s, i);
  return out;
}

namespace {
template <typename F>
void for_each_run(const ParamLayout& layout, const ModelShard& s, F f) {
  const auto local_sizes = local_param_sizes(layout, s);
  size_t full_base = 0, local_base = 0;
  for (int i = 0; i < layout.size(); ++i) {
    for (const ShardRun& run : shard_runs(layout, s, i))
      f(full_base + run.full, local_base + run.local, run.count);
    full_base += layout.full_size(i);
    local_base += local_sizes[static_cast<size_t>(i)];
  }
}
}  // namespace

void full_to_shard(const ParamLayout& layout, const ModelShard& s, const float* full, float* local) {
  for_each_run(layout, s,
               [&](size_t f, size_t l, size_t n) { std::memcpy(local + l, full + f, n * sizeof(float)); });
}

void shard_to_full(const ParamLayout& layout, const ModelShard& s, const float* local, float* full) {
  for_each_run(layout, s,
               [&](size_t f, size_t l, size_t n) { std::memcpy(full + f, local + l, n * sizeof(float)); });
}

bool counts_once(const ParamLayout& layout, const ModelShard& s, int tensor) {
  const TensorSpec& t = layout[tensor];
  if (t.holder == Holder::kFirstAndLastStage && !s.first_stage()) return false;  // the last stage's tied copy
  return t.split != TpSplit::kReplicated || s.tp_rank == 0;
}

}  // namespace flotilla
