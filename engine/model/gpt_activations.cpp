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

size_t carve(const GptDims& d, const GptShard& s, int B, int T, float* base, GptActivations* a) {
  const size_t L = static_cast<size_t>(s.local_layers()), C = static_cast<size_t>(d.n_embd);
  const size_t tp = static_cast<size_t>(s.tp);
  const size_t Ca = C / tp, F = 4 * C / tp, NH = static_cast<size_t>(d.n_head) / tp;
  const size_t Vl = s.last_stage() ? static_cast<size_t>(d.padded_vocab) / tp : 0;
  const size_t head = s.last_stage() ? 1 : 0;
  const size_t N = static_cast<size_t>(B) * static_cast<size_t>(T);
  const size_t lse = static_cast<size_t>(B) * NH * static_cast<size_t>(T);
  Carver c(base);
  a->ln1_ = c.take(L * N * C);
  a->ln1_mean_ = c.take(L * N);
  a->ln1_rstd_ = c.take(L * N);
  a->qkv_ = c.take(L * N * 3 * Ca);
  a->atty_ = c.take(L * N * Ca);
  a->att_lse_ = c.take(L * lse);
  a->residual2_ = c.take(L * N * C);
  a->ln2_ = c.take(L * N * C);
  a->ln2_mean_ = c.take(L * N);
  a->ln2_rstd_ = c.take(L * N);
  a->fch_ = c.take(L * N * F);
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
  return c.used();
}

}  // namespace

size_t activation_arena_floats(const GptDims& d, const GptShard& s, int B, int T) {
  GptActivations unused;
  return carve(d, s, B, T, nullptr, &unused);
}

size_t activation_arena_floats(const GptDims& d, int B, int T) {
  return activation_arena_floats(d, resolve_shard(d, GptShard{}), B, T);
}

GptActivations layout_activations(const GptDims& d, const GptShard& s, int B, int T, float* base) {
  GptActivations a;
  carve(d, s, B, T, base, &a);
  return a;
}

size_t activation_floats(const GptDims& d, int B, int T) { return activation_arena_floats(d, B, T); }

}  // namespace flotilla
