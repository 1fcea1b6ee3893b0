// Activation arena layout. Non-obvious decision: one routine walks the tensor list both to count
// (base == nullptr) and to hand out pointers, so the size the planner is told and the layout the
// model uses come from the same lines. Every tensor starts on a 64-byte boundary (SIMD loads).
#include "engine/model/gpt_activations.h"

namespace flotilla {
namespace {

class Carver {
 public:
  explicit Carver(float* base) : base_(base) {}
  float* take(size_t floats) {
    float* p = base_ != nullptr ? base_ + used_ : nullptr;
    used_ += (floats + 15) / 16 * 16;
    return p;
  }
  size_t used() const { return used_; }

 private:
  float* base_;
  size_t used_ = 0;
};

// Walks the tensor list; the eleven recomputable per-layer tensors go to `blk` with one layer when
// recompute is on, to the arena `c` with L layers otherwise.
ActivationSizes carve(const GptDims& d, const GptShard& s, int B, int T, bool recompute, float* base,
                      float* block_base, GptActivations* a) {
  const size_t L = static_cast<size_t>(s.local_layers()), C = static_cast<size_t>(d.n_embd);
  const size_t tp = static_cast<size_t>(s.tp);
  const size_t Ca = C / tp, F = 4 * C / tp, NH = static_cast<size_t>(d.n_head) / tp;
  const size_t Vl = s.last_stage() ? static_cast<size_t>(d.padded_vocab) / tp : 0;
  const size_t head = s.last_stage() ? 1 : 0;
  const size_t N = static_cast<size_t>(B) * static_cast<size_t>(T);
  const size_t lse = static_cast<size_t>(B) * NH * static_cast<size_t>(T);
  Carver c(base), block(block_base);
  Carver& r = recompute ? block : c;  // where the recomputable tensors live
  const size_t Lr = recompute ? 1 : L;  // how many layers of them
  a->ln1_ = r.take(Lr * N * C);
  a->ln1_mean_ = r.take(Lr * N);
  a->ln1_rstd_ = r.take(Lr * N);
  a->qkv_ = r.take(Lr * N * 3 * Ca);
  a->atty_ = r.take(Lr * N * Ca);
  a->att_lse_ = r.take(Lr * lse);
  a->residual2_ = r.take(Lr * N * C);
  a->ln2_ = r.take(Lr * N * C);
  a->ln2_mean_ = r.take(Lr * N);
  a->ln2_rstd_ = r.take(Lr * N);
  a->fch_ = r.take(Lr * N * F);
  a->residual3_ = c.take(L * N * C);
  a->encoded = c.take(N * C);
  a->lnf = c.take(head * N * C);
  a->lnf_mean = c.take(head * N);
  a->lnf_rstd = c.take(head * N);
  a->logits = c.take(N * Vl);
  a->losses = c.take(head * N);
  a->loss_lse = c.take(head * N);
  static_assert(sizeof(int32_t) == sizeof(float), "token ids share the float arena");
  a->input_ids = reinterpret_cast<int32_t*>(c.take(N));
  a->target_ids = reinterpret_cast<int32_t*>(c.take(N));
  a->gelu = c.take(N * F);
  a->proj = c.take(N * C);
  a->dresidual = c.take(N * C);
  a->dln = c.take(N * C);
  a->dbig = c.take(N * F);
  a->nc = N * C;
  a->n = N;
  a->lse_per_layer = lse;
  a->nca = N * Ca;
  a->nf = N * F;
  a->ks = recompute ? 0 : 1;
  return {c.used(), recompute ? block.used() : 0};
}

}  // namespace

ActivationSizes activation_sizes(const GptDims& d, const GptShard& s, int B, int T, bool recompute) {
  GptActivations unused;
  return carve(d, s, B, T, recompute, nullptr, nullptr, &unused);
}

size_t activation_arena_floats(const GptDims& d, const GptShard& s, int B, int T) {
  return activation_sizes(d, s, B, T, false).arena;
}

size_t activation_arena_floats(const GptDims& d, int B, int T) {
  return activation_arena_floats(d, resolve_shard(d, GptShard{}), B, T);
}

GptActivations layout_activations(const GptDims& d, const GptShard& s, int B, int T, float* base,
                                  bool recompute, float* block_base) {
  GptActivations a;
  carve(d, s, B, T, recompute, base, block_base, &a);
  return a;
}

size_t activation_floats(const GptDims& d, int B, int T, bool recompute) {
  return activation_sizes(d, resolve_shard(d, GptShard{}), B, T, recompute).total();
}

}  // namespace flotilla
