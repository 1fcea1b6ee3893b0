// Model's private state, shared by model.cpp (buffers, slots, the stage API), vocab_parallel.cpp
// (the tensor-parallel embedding and cross-entropy both architectures use) and each
// architecture's pass (gpt2_pass.cpp, llama_pass.cpp). Internal header.
//
// Non-obvious decision: every activation slot owns a whole arena (kept tensors and scratch), so
// a slot's backward scratch can never be clobbered by another micro-batch in flight; a whole
// model has exactly one slot and so the same memory as before pipelining existed. The one
// exception is the recompute block region: it holds nothing a slot needs between calls (backward
// rebuilds it first), so all slots share it. Each arena starts with a generic head (token ids,
// targets, positions, and the fp32 scratch tensor parallelism and bf16 pipeline boundaries need),
// then the architecture's own tensors.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/comm/process_group.h"
#include "engine/core/error.h"
#include "engine/model/lora.h"
#include "engine/model/model.h"

namespace flotilla {

// Hands out aligned pieces of one buffer; counts bytes when its base is null (layout and size
// come from the same lines).
class Carver {
 public:
  Carver(void* base, size_t align) : base_(static_cast<char*>(base)), align_(align) {}
  template <typename T>
  T* take(size_t count) {
    T* p = base_ != nullptr ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ += (count * sizeof(T) + align_ - 1) / align_ * align_;
    return p;
  }
  size_t used() const { return used_; }

 private:
  char* base_;
  size_t align_;
  size_t used_ = 0;
};

// Bytes of one slot's arena and of the shared recompute region.
struct ActivationSizes {
  size_t arena = 0;
  size_t block = 0;
};

// Everything an activation layout depends on.
struct ActivationPlan {
  ModelDims d;
  ModelShard s;  // resolved
  int B = 0, T = 0;
  bool recompute = false;
  ModelOptions opt;
  size_t align = 64;
  size_t N() const { return static_cast<size_t>(B) * static_cast<size_t>(T); }
  bool bf16() const { return opt.dtype == DType::kBF16; }
  size_t logit_rows() const;  // rows of the arena's logits buffer (logits_buffer_rows)
};

// Rows of logits the arena holds for N = B*T rows: one chunk of ModelOptions::logits_chunk_rows, or
// all N (chunk_rows 0, or a chunk at least N: then one chunk, exactly the unchunked pass).
inline size_t logits_buffer_rows(size_t N, int chunk_rows) {
  return chunk_rows > 0 && static_cast<size_t>(chunk_rows) < N ? static_cast<size_t>(chunk_rows) : N;
}
inline size_t ActivationPlan::logit_rows() const { return logits_buffer_rows(N(), opt.logits_chunk_rows); }

// The last stage's LM head as the passes hand it over (vocab_parallel.cpp runs it): the final norm's
// output lnf (N, C), the head weight (Vl, C) and its gradient (null when frozen), the arena's logits
// buffer (logit_rows() x Vl, d(logits) in backward), per-row losses and log-sum-exp (N), and dln
// (N, C), where backward writes d(lnf).
template <typename S>
struct HeadBuffers {
  S* lnf = nullptr;
  const S* weight = nullptr;
  S* dweight = nullptr;
  S* logits = nullptr;
  float* losses = nullptr;
  float* lse = nullptr;
  S* dln = nullptr;
};

// The generic head of a slot's arena (defined below).
struct SlotHead;
SlotHead carve_head(const ActivationPlan& p, Carver& c);

// The generic head of a slot's arena (N = B*T).
struct SlotHead {
  int32_t* inputs = nullptr;     // (N) ids (under TP: rows of this rank's embedding slice, -1 elsewhere)
  int32_t* targets = nullptr;    // (N) ids (under TP: this rank's columns, -1 elsewhere; kIgnoreTarget kept)
  int32_t* positions = nullptr;  // (N) position of each token in its document
  float* tp_sum = nullptr;       // (N, C) fp32: a bf16 activation widened for its TP all-reduce
  float* vp_stats = nullptr;     // ((tp + 1) * N) fp32: every rank's log-sum-exp, then the target logits
  float* out_f32 = nullptr;      // (N, C) fp32: a bf16 non-last stage's output, sent on
  float* dinput_f32 = nullptr;   // (N, C) fp32: a bf16 non-first stage's d(input), sent back
};

// One flat parameter vector with its gradients and its ZeRO-2 staging: the architecture's tensors,
// or a LoRA model's adapters. Per-layer tensors hold `layers` slices each.
struct ParamSet {
  explicit ParamSet(ParamLayout l) : layout(std::move(l)) {}

  ParamLayout layout;
  std::vector<size_t> offsets, sizes;  // per tensor, elements in the parameter buffer
  size_t n = 0;
  int layers = 1;
  BackendBuffer params;
  BackendBuffer grads;  // every tensor (offsets), or only the non-layer ones (goffsets) when staged
  bool frozen = false;  // no gradients at all (a LoRA model's base): G and LG are null
  bool staged = false;
  BackendBuffer staging;  // two slots of layer_floats elements
  size_t layer_floats = 0;
  std::vector<size_t> goffsets, layer_goff;

  // Sizes and offsets of this shard's tensors; buffers of `es`-byte elements (params with room
  // for `capacity`, gradients unless frozen).
  // Tensors listed in `absent` hold nothing (a QLoRA base's projections, kept quantised instead).
  void allocate(Backend& be, const ModelShard& s, size_t es, size_t capacity, bool frozen_set,
                const std::vector<int>& absent = {});
  void enable_staging(Backend& be, size_t es);
  void zero_grad(Backend& be, size_t es);
  size_t layer_grad_floats() const;

  template <typename S>
  S* P(int i) {
    return params.as<S>() + offsets[static_cast<size_t>(i)];
  }
  template <typename S>
  S* G(int i) {  // a non-layer tensor's gradient (any tensor's without staging); null when frozen
    return frozen ? nullptr : grads.as<S>() + goffsets[static_cast<size_t>(i)];
  }
  size_t per_layer(int i) const { return sizes[static_cast<size_t>(i)] / static_cast<size_t>(layers); }
  template <typename S>
  S* LP(int i, int l) {
    return P<S>(i) + static_cast<size_t>(l) * per_layer(i);
  }
  template <typename S>
  S* LG(int i, int l) {
    if (frozen) return nullptr;
    if (staged)
      return staging.as<S>() + static_cast<size_t>(l % 2) * layer_floats + layer_goff[static_cast<size_t>(i)];
    return G<S>(i) + static_cast<size_t>(l) * per_layer(i);
  }
};

struct Model::Impl {
  struct Slot {
    BackendBuffer arena;
    int B = 0, T = 0;
    bool forwarded = false;      // holds a forward not yet consumed by backward
    bool have_targets = false;   // last stage: the forward computed a loss
    bool logits_valid = false;   // false once backward has overwritten them with dlogits
    bool has_positions = false;  // the forward was given document positions
    int gelu_layer = -1;         // GPT-2 without keep_gelu: the layer whose GELU output the scratch holds
    int64_t counted = 0;         // targets with a loss (not kIgnoreTarget)
    uint64_t drop_key = 0;       // LoRA dropout: this forward's masks (0: no dropout, e.g. evaluation)
    int logit_rows = 0;          // rows of logits the forward computed: B*T, or B (forward_cached's logit_at)
    bool wide_logits = false;    // they are in Impl::wide_logits (no targets, more rows than a chunk)
    bool chunked = false;  // a forward with targets in several chunks: only the last one's logits are kept
  };

  explicit Impl(const ModelDims& dims) : d(dims), base(ParamLayout(dims)) {}

  ModelDims d;
  ModelShard s;
  ModelOptions opt;
  Backend* be = nullptr;
  ParamSet base;  // the architecture's tensors (frozen under LoRA)
  // QLoRA: this shard's slice of every local layer's projection modules (base_weights.h), one
  // buffer; views[l * kBaseModules + m] point into it (their statistics' pointers included).
  struct QuantBase {
    BackendBuffer buf;
    std::vector<nf4::View> views;
    size_t bytes = 0;
  };
  QuantBase q4;
  bool nf4() const { return opt.lora.enabled() && opt.lora.nf4; }
  const nf4::View& qview(int l, int module) const {
    return q4.views[static_cast<size_t>(l) * kNumLoraTargets + static_cast<size_t>(module)];
  }
  std::unique_ptr<ParamSet> adapters;  // LoRA: the adapters, what trains (opt.lora.enabled())
  ParamSet& train() { return adapters ? *adapters : base; }
  const ParamSet& train() const { return adapters ? *adapters : base; }
  bool training = true;    // forwards draw LoRA dropout masks (set_training)
  int64_t drop_step = 0;   // set_dropout_step: the optimizer step the next forwards belong to
  int drop_stream = 0;     // ... and the data-parallel rank
  int64_t drop_micro = 0;  // forwards since then
  std::vector<Slot> slots;
  bool recompute = false;
  BackendBuffer block;  // the recompute block region
  int block_slot = -1, block_layer = -1;
  int last_backward_slot = -1;
  int last_forward_slot = -1;
  std::function<void(int)> layer_hook;
  comm::ProcessGroup* tp = nullptr;
  BackendBuffer stage_bufs;  // pipeline receive buffers: recv_act then recv_grad, fp32 (N, C) each
  int stage_N = 0;
  BackendBuffer rope;  // llama: inv_freq (head_dim / 2) fp32 in backend memory
  // Inference's KV cache (Model::enable_kv_cache): per local layer K then V, each (rows, len,
  // kv heads * head_dim) of dtype() elements. `active` while forward_cached runs: the passes then
  // call attention_cached_forward (cache rows row0..) and the LM head reads the rows logit_at names.
  struct KvCache {
    BackendBuffer buf;
    int rows = 0, len = 0;
    size_t per = 0;  // elements of one layer's K (and of its V)
    bool active = false;
    int row0 = 0;
    const int32_t* logit_at = nullptr;  // host, B entries, or null: every token's logits
  };
  KvCache kv;
  template <typename S>
  S* kv_k(int l) {
    return kv.buf.as<S>() + 2 * static_cast<size_t>(l) * kv.per;
  }
  template <typename S>
  S* kv_v(int l) {
    return kv.buf.as<S>() + (2 * static_cast<size_t>(l) + 1) * kv.per;
  }
  // The rows the LM head computes, recorded in sl.logit_rows: every token's, or under forward_cached
  // with logit_at one per row, its final-norm output gathered to the front of lnf ((B, C) then).
  template <typename S>
  int head_rows(Slot& sl, S* lnf) {
    if (!kv.active || kv.logit_at == nullptr) return sl.logit_rows = sl.B * sl.T;
    const size_t C = static_cast<size_t>(d.n_embd);
    for (int b = 0; b < sl.B; ++b) {  // row b's source is at b*T + at >= b: never overwritten first
      const size_t src =
          static_cast<size_t>(b) * static_cast<size_t>(sl.T) + static_cast<size_t>(kv.logit_at[b]);
      if (src != static_cast<size_t>(b))
        be->copy(lnf + static_cast<size_t>(b) * C, lnf + src * C, C * sizeof(S));
    }
    return sl.logit_rows = sl.B;
  }
  // Every logit of a forward without targets on a chunked model (more rows than the arena's chunk):
  // allocated on first use, inference only (see Model's "The fused LM head").
  BackendBuffer wide_logits;
  template <typename S>
  S* slot_logits(Slot& sl, S* arena_logits) {
    return sl.wide_logits ? wide_logits.as<S>() : arena_logits;
  }
  std::vector<float> host_stats;
  std::vector<int32_t> host_ids;
  std::vector<float> host_logits;  // logits() on a device or bf16 model

  size_t es() const { return dtype_bytes(opt.dtype); }
  bool bf16() const { return opt.dtype == DType::kBF16; }
  const LoraSpec& lora() const { return opt.lora; }
  // The architecture's tensor i (the base under LoRA): parameters, and gradients (null when frozen).
  template <typename S>
  S* P(int i) {
    return base.P<S>(i);
  }
  template <typename S>
  S* G(int i) {
    return base.G<S>(i);
  }
  // Local layer l of per-layer tensor i: its parameters, and its gradient (in grads or its staging slot).
  template <typename S>
  S* LP(int i, int l) {
    return base.LP<S>(i, l);
  }
  template <typename S>
  S* LG(int i, int l) {
    return base.LG<S>(i, l);
  }
  // LoRA target t's A and B in local layer l, and their gradients.
  template <typename S>
  S* LA(int t, int l) {
    return adapters->LP<S>(lora().a_index(t), l);
  }
  template <typename S>
  S* LB(int t, int l) {
    return adapters->LP<S>(lora().b_index(t), l);
  }
  template <typename S>
  S* dLA(int t, int l) {
    return adapters->LG<S>(lora().a_index(t), l);
  }
  template <typename S>
  S* dLB(int t, int l) {
    return adapters->LG<S>(lora().b_index(t), l);
  }

  // Vocabulary rows of the embedding/head this rank holds, the first of them, and how many are real.
  int Vl() const { return d.padded_vocab / s.tp; }
  int v0() const { return s.tp_rank * Vl(); }
  int v_real() const {
    const int n = d.vocab_size - v0();
    return n < 0 ? 0 : (n > Vl() ? Vl() : n);
  }

  Slot& slot(int k) {
    if (k < 0 || static_cast<size_t>(k) >= slots.size())
      throw Error(ExitCode::kInternal,
                  "Model: activation slot " + std::to_string(k) + " of " + std::to_string(slots.size()));
    return slots[static_cast<size_t>(k)];
  }

  ActivationPlan plan(int B, int T) const;
  // Activation sizes for B x T of this model's architecture (the head included).
  ActivationSizes activation_sizes(int B, int T) const;

  // Sums x (n values of S, backend memory) over the TP group in place; bf16 is summed in fp32
  // through `f32` (n floats). Blocks until the sum is there.
  template <typename S>
  void tp_reduce(S* x, size_t n, float* f32);
  // The token embedding of the first stage: out (N, C) = embed[ids] (+ wpe[pos] on TP rank 0; wpe
  // may be null), summed over the TP group when the vocabulary is split (vocab_parallel.cpp).
  template <typename S>
  void embed_forward(const SlotHead& h, S* out, const S* wte, const S* wpe, const int32_t* pos, int B, int T,
                     float* f32);
  template <typename S>
  void embed_backward(const SlotHead& h, S* dwte, S* dwpe, const S* dout, const int32_t* pos, int B, int T);
  // The LM head and loss of the last stage, chunk by chunk of opt.logits_chunk_rows rows (the fused
  // LM head, model.h): forward returns the mean loss over the counted targets (with targets), or -1
  // after writing every row's logits (without: the arena's buffer, or wide_logits). Backward
  // (targets only) writes d(lnf) into dln and accumulates the head's gradient.
  template <typename S>
  float head_forward(Slot& sl, const SlotHead& h, const HeadBuffers<S>& hb, const int32_t* host_targets);
  template <typename S>
  void head_backward(Slot& sl, const SlotHead& h, const HeadBuffers<S>& hb, float loss_scale);
  // The cross-entropy of rows [r0, r0 + n) of N from their logits (one chunk, (n, Vl)): per-row losses
  // and log-sum-exp (under TP this rank's, and the target logits into vp_stats); then, once after
  // every chunk, the sum of the losses (under TP the collectives and the global lse first).
  template <typename S>
  void crossentropy_rows(const SlotHead& h, const S* logits, float* losses, float* lse, size_t N, size_t r0,
                         size_t n);
  double crossentropy_finish(Slot& sl, const SlotHead& h, float* losses, float* lse,
                             const int32_t* host_targets);
  // Backward of rows [r0, r0 + n): d(logits) = dloss * (softmax - onehot) in place, with the global lse.
  template <typename S>
  void crossentropy_backward_rows(const SlotHead& h, S* logits, const float* lse, float dloss, size_t r0,
                                  size_t n);
};

// out[0..n) ~ N(0, stddev), from per-chunk RNG streams of (seed, tensor): parallel and the same
// for any thread count (model.cpp).
void fill_normal(float* out, size_t n, float stddev, uint64_t seed, uint64_t tensor);

// The architectures' passes (gpt2_pass.cpp, llama_pass.cpp), for S = float or bf16_t.
namespace gpt2 {
ActivationSizes activation_sizes(const ActivationPlan& p);
template <typename S>
float forward(Model::Impl& m, int slot, const float* stage_in, const int32_t* host_targets);
template <typename S>
void backward(Model::Impl& m, int slot, const float* dout, float loss_scale);
template <typename S>
float* stage_output(Model::Impl& m, int slot);  // fp32 (N, C)
template <typename S>
float* stage_input_grad(Model::Impl& m, int slot);
template <typename S>
S* logits(Model::Impl& m, int slot);
// Tensor i of the whole model (n floats) as GPT-2 initialises it.
void init_tensor(const ModelDims& d, int i, float* t, size_t n, uint64_t seed);
}  // namespace gpt2

namespace llama {
ActivationSizes activation_sizes(const ActivationPlan& p);
template <typename S>
float forward(Model::Impl& m, int slot, const float* stage_in, const int32_t* host_targets);
template <typename S>
void backward(Model::Impl& m, int slot, const float* dout, float loss_scale);
template <typename S>
float* stage_output(Model::Impl& m, int slot);
template <typename S>
float* stage_input_grad(Model::Impl& m, int slot);
template <typename S>
S* logits(Model::Impl& m, int slot);
void init_tensor(const ModelDims& d, int i, float* t, size_t n, uint64_t seed);
// inv_freq[j] = theta^(-2j/head_dim) with the configured scaling (docs/planner.md), fp32.
std::vector<float> rope_inv_freq(const ModelDims& d);
}  // namespace llama

}  // namespace flotilla
