// GptModel's private state, shared by gpt.cpp (parameters), gpt_pass.cpp (forward/backward)
// and gpt_vocab_parallel.cpp (tensor-parallel embedding and cross-entropy). Internal header.
//
// Non-obvious decision: every activation slot owns a whole arena (kept tensors and scratch), so
// a slot's GELU cache and backward scratch can never be clobbered by another micro-batch in
// flight; a whole model has exactly one slot and so the same memory as before pipelining existed.
// The one exception is the recompute block region: it holds nothing a slot needs between calls
// (backward rebuilds it first), so all slots share it.
#pragma once

#include <array>
#include <functional>
#include <string>
#include <vector>

#include "engine/backend/registry.h"
#include "engine/core/error.h"
#include "engine/model/gpt.h"
#include "engine/model/gpt_activations.h"
#include "engine/model/gpt_shard.h"
#include "engine/parallel/process_group.h"

namespace flotilla {

struct GptModel::Impl {
  struct Slot {
    BackendBuffer arena;
    GptActivations acts;
    int B = 0, T = 0;
    bool forwarded = false;     // holds a forward not yet consumed by backward
    bool have_targets = false;  // last stage: the forward computed a loss
    bool logits_valid = false;  // false once backward has overwritten them with dlogits
    int gelu_layer = -1;        // local layer whose GELU output the scratch holds, -1 if none
  };

  GptDims d;
  GptShard s;
  Backend* be = nullptr;
  std::array<size_t, kNumParamTensors> offsets{};
  std::array<size_t, kNumParamTensors> sizes{};
  BackendBuffer params;
  BackendBuffer grads;  // every tensor (offsets), or only the non-layer ones (goffsets) when staged
  // ZeRO-2 layer-gradient staging (GptModel::enable_layer_grad_staging): two slots of one layer's
  // gradients each, layer l in slot l % 2, tensors in ParamIndex order at layer_goff.
  bool staged = false;
  BackendBuffer staging;
  size_t layer_floats = 0;
  std::array<size_t, kNumParamTensors> goffsets{};
  std::array<size_t, kNumParamTensors> layer_goff{};
  std::vector<Slot> slots;
  // Recomputation (GptModel::set_recompute): the block region every slot's ln1 .. fch point into,
  // and which slot's forward and which of its layers it currently holds (-1: nothing valid).
  bool recompute = false;
  BackendBuffer block;
  int block_slot = -1, block_layer = -1;
  int last_backward_slot = -1;
  const GptActivations* last_forward = nullptr;  // for logits()
  std::function<void(int)> layer_hook;           // data-parallel overlap (set_layer_backward_hook)
  parallel::ProcessGroup* tp = nullptr;
  std::vector<float> vp_scratch;    // vocab-parallel cross-entropy: gathered lse + target logits
  std::vector<int32_t> vp_targets;  // targets local to this TP rank's vocabulary columns

  float* p(int index) { return params.data() + offsets[static_cast<size_t>(index)]; }
  float* g(int index) { return grads.data() + goffsets[static_cast<size_t>(index)]; }
  // Layer l's slice of per-layer tensor `index`'s gradient (in grads, or in its staging slot).
  float* lg(int index, size_t l) {
    const auto i = static_cast<size_t>(index);
    if (staged) return staging.data() + (l % 2) * layer_floats + layer_goff[i];
    return grads.data() + offsets[i] + l * (sizes[i] / static_cast<size_t>(s.local_layers()));
  }

  // Widths of this shard.
  int C() const { return d.n_embd; }
  int Ca() const { return d.n_embd / s.tp; }  // attention columns (this rank's heads)
  int NHl() const { return d.n_head / s.tp; }
  int F() const { return 4 * d.n_embd / s.tp; }
  int Vl() const { return d.padded_vocab / s.tp; }  // vocabulary rows of wte held here
  int v0() const { return s.tp_rank * Vl(); }       // first of them
  // Real (non-padding) vocabulary columns among this rank's, counted from v0.
  int v_real() const {
    const int n = d.vocab_size - v0();
    return n < 0 ? 0 : (n > Vl() ? Vl() : n);
  }

  void tp_all_reduce(float* x, size_t n) {
    if (s.tp > 1) tp->all_reduce(x, n);
  }

  void check_tokens(const int32_t* tokens, size_t n, const char* what) const {
    for (size_t i = 0; i < n; ++i) {
      if (tokens[i] < 0 || tokens[i] >= d.vocab_size)
        throw_data(std::string(what) + " token id " + std::to_string(tokens[i]) + " at position " +
                   std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(d.vocab_size) +
                   "); check that the data was tokenized for model.vocab_size");
    }
  }

  Slot& slot(int k) {
    if (k < 0 || static_cast<size_t>(k) >= slots.size())
      throw Error(ExitCode::kInternal,
                  "GptModel: activation slot " + std::to_string(k) + " of " + std::to_string(slots.size()));
    return slots[static_cast<size_t>(k)];
  }

  // Block l's forward into the activations `a` from `residual` (its input), up to the GELU output
  // (`full`: also the MLP-down projection, its all-reduce and residual3). gpt_pass.cpp.
  void block_forward(const GptActivations& a, int l, const float* residual, int B, int T, bool full);

  // Tensor-parallel pieces (gpt_vocab_parallel.cpp); B*T = N rows.
  void vp_embed_forward(const GptActivations& a, int B, int T);
  void vp_embed_backward(const GptActivations& a, int B, int T);
  void vp_crossentropy_forward(const GptActivations& a, size_t N);
  void vp_crossentropy_backward(const GptActivations& a, size_t N, float dloss);
};

}  // namespace flotilla
