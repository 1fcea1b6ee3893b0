// GPT-2's training step as an explicit sequence of backend kernels (llm.c style), for the whole
// model or one tensor/pipeline-parallel shard, in fp32 or bf16 storage, on any backend.
//
// Megatron's conjugate operators, written out where they act: "f" is the identity forward and an
// all-reduce of d(input) backward, in front of each column-parallel matmul (QKV, MLP-up, and the
// vocab-parallel LM head); "g" is an all-reduce forward and the identity backward, behind each
// row-parallel matmul (attention-out, MLP-down), whose bias only TP rank 0 adds so it counts once.
// Non-obvious decisions:
// - The residual add is fused into the LayerNorm that follows it (residual_layernorm_forward: the
//   next block's ln1, or lnf), which a backend may run as one kernel (CUDA) or as its two parts
//   (CPU: the same kernels, in the same order, as a separate add then LayerNorm).
// - The GELU output is either kept per layer (ModelOptions::keep_gelu, a GPU's choice; optionally
//   fused into the MLP-up matmul's epilogue) or held in one scratch buffer and recomputed in
//   backward for every layer but the last (the CPU's: a third less activation memory).
// - The row-parallel biases' gradients are still computed on every TP rank (from the replicated
//   d(output)), so every replicated tensor stays bitwise equal across TP ranks without
//   communication of its own.
#include <algorithm>
#include <cmath>

#include "engine/model/gpt.h"
#include "engine/model/model_impl.h"

namespace flotilla::gpt2 {
namespace {

// The activations of one slot (N = B*T; Ca = C/tp attention columns, F = 4C/tp MLP columns,
// NH = n_head/tp heads, Vl = Vp/tp logit columns on the last stage only). Per-layer stacks are
// indexed through the accessors; under recomputation all but residual3 hold one layer (in the
// shared block region) and ks is 0.
template <typename S>
struct Acts {
  SlotHead h;
  S* ln1_ = nullptr;           // (L, N, C)
  float* ln1_mean_ = nullptr;  // (L, N)
  float* ln1_rstd_ = nullptr;  // (L, N)
  S* qkv_ = nullptr;           // (L, N, 3Ca)
  S* atty_ = nullptr;          // (L, N, Ca)  attention output, heads concatenated
  float* att_lse_ = nullptr;   // (L, B, NH, T) attention log-sum-exp per query
  S* residual2_ = nullptr;     // (L, N, C)   residual + attention branch
  S* ln2_ = nullptr;           // (L, N, C)
  float* ln2_mean_ = nullptr;  // (L, N)
  float* ln2_rstd_ = nullptr;  // (L, N)
  S* fch_ = nullptr;           // (L, N, F)   MLP pre-activation (GELU input)
  S* fch_gelu_ = nullptr;      // (L, N, F)   GELU output (keep_gelu only)
  S* residual3_ = nullptr;     // (L, N, C)   residual2 + MLP branch: the block output
  S* encoded = nullptr;        // (N, C)   token + position embedding, or the stage's input
  S* lnf = nullptr;            // (N, C)
  float* lnf_mean = nullptr;   // (N)
  float* lnf_rstd = nullptr;   // (N)
  S* logits = nullptr;         // (chunk rows, Vl) one chunk of the head (N without chunking); dlogits
  float* losses = nullptr;     // (N)
  float* loss_lse = nullptr;   // (N)    log-sum-exp of each row of logits
  S* gelu = nullptr;           // (N, F)   GELU output of one layer (without keep_gelu)
  S* proj = nullptr;           // (N, C)   attproj/fcproj output; d atty (N, Ca) in backward
  S* dresidual = nullptr;      // (N, C)
  S* dln = nullptr;            // (N, C)   gradient into a LayerNorm output
  S* dbig = nullptr;           // (N, max(F, 3Ca)) d fch, or d qkv
  size_t nc = 0, n = 0, lse_per_layer = 0, nca = 0, nf = 0, ks = 1;

  S* ln1(int l) const { return ln1_ + ks * l * nc; }
  float* ln1_mean(int l) const { return ln1_mean_ + ks * l * n; }
  float* ln1_rstd(int l) const { return ln1_rstd_ + ks * l * n; }
  S* qkv(int l) const { return qkv_ + ks * l * 3 * nca; }
  S* atty(int l) const { return atty_ + ks * l * nca; }
  float* att_lse(int l) const { return att_lse_ + ks * l * lse_per_layer; }
  S* residual2(int l) const { return residual2_ + ks * l * nc; }
  S* ln2(int l) const { return ln2_ + ks * l * nc; }
  float* ln2_mean(int l) const { return ln2_mean_ + ks * l * n; }
  float* ln2_rstd(int l) const { return ln2_rstd_ + ks * l * n; }
  S* fch(int l) const { return fch_ + ks * l * nf; }
  S* fch_gelu(int l) const { return fch_gelu_ + ks * l * nf; }
  S* residual3(int l) const { return residual3_ + l * nc; }
};

// One routine both counts (null bases) and hands out pointers, so the size the planner is told
// and the layout the model uses come from the same lines. The tensor order is the CPU arena's
// since before the model seam (so its size, every tensor 64-byte aligned, is unchanged).
template <typename S>
ActivationSizes carve(const ActivationPlan& p, void* base, void* block_base, Acts<S>* a) {
  const ModelDims& d = p.d;
  const ModelShard& s = p.s;
  const size_t L = static_cast<size_t>(s.local_layers()), C = static_cast<size_t>(d.n_embd);
  const size_t tp = static_cast<size_t>(s.tp);
  const size_t Ca = C / tp, F = 4 * C / tp, NH = static_cast<size_t>(d.n_head) / tp;
  const size_t Vl = s.last_stage() ? static_cast<size_t>(d.padded_vocab) / tp : 0;
  const size_t head = s.last_stage() ? 1 : 0;
  const size_t N = p.N();
  const size_t lse = static_cast<size_t>(p.B) * NH * static_cast<size_t>(p.T);
  Carver c(base, p.align), block(block_base, p.align);
  a->h = carve_head(p, c);
  Carver& r = p.recompute ? block : c;    // where the recomputable tensors live
  const size_t Lr = p.recompute ? 1 : L;  // how many layers of them
  a->ln1_ = r.take<S>(Lr * N * C);
  a->ln1_mean_ = r.take<float>(Lr * N);
  a->ln1_rstd_ = r.take<float>(Lr * N);
  a->qkv_ = r.take<S>(Lr * N * 3 * Ca);
  a->atty_ = r.take<S>(Lr * N * Ca);
  a->att_lse_ = r.take<float>(Lr * lse);
  a->residual2_ = r.take<S>(Lr * N * C);
  a->ln2_ = r.take<S>(Lr * N * C);
  a->ln2_mean_ = r.take<float>(Lr * N);
  a->ln2_rstd_ = r.take<float>(Lr * N);
  a->fch_ = r.take<S>(Lr * N * F);
  if (p.opt.keep_gelu) a->fch_gelu_ = r.take<S>(Lr * N * F);
  a->residual3_ = c.take<S>(L * N * C);
  a->encoded = c.take<S>(N * C);
  a->lnf = c.take<S>(head * N * C);
  a->lnf_mean = c.take<float>(head * N);
  a->lnf_rstd = c.take<float>(head * N);
  a->logits = c.take<S>(p.logit_rows() * Vl);  // one chunk of rows (the fused LM head)
  a->losses = c.take<float>(head * N);
  a->loss_lse = c.take<float>(head * N);
  if (!p.opt.keep_gelu) a->gelu = c.take<S>(N * F);
  a->proj = c.take<S>(N * C);
  a->dresidual = c.take<S>(N * C);
  a->dln = c.take<S>(N * C);
  a->dbig = c.take<S>(N * std::max(F, 3 * Ca));
  a->nc = N * C;
  a->n = N;
  a->lse_per_layer = lse;
  a->nca = N * Ca;
  a->nf = N * F;
  a->ks = p.recompute ? 0 : 1;
  return {c.used(), p.recompute ? block.used() : 0};
}

template <typename S>
Acts<S> slot_acts(Model::Impl& m, int slot) {
  Model::Impl::Slot& sl = m.slot(slot);
  Acts<S> a;
  carve<S>(m.plan(sl.B, sl.T), sl.arena.data(), m.block.data(), &a);
  return a;
}

// One micro-batch's pass over this rank's shard.
template <typename S>
struct Pass {
  Model::Impl& m;
  Model::Impl::Slot& sl;
  Backend& be;
  const Acts<S> a;
  const int B, T, L, C, Ca, NH, F, Vl;
  const size_t N, C_, NC, Ca_, F_;
  const int n_;
  const long Nl;
  const bool rank0, first, last;
  const int32_t* pos;  // document positions in backend memory, or null

  Pass(Model::Impl& impl, int slot)
      : m(impl),
        sl(impl.slot(slot)),
        be(*impl.be),
        a(slot_acts<S>(impl, slot)),
        B(sl.B),
        T(sl.T),
        L(impl.s.local_layers()),
        C(impl.d.n_embd),
        Ca(impl.d.n_embd / impl.s.tp),
        NH(impl.d.n_head / impl.s.tp),
        F(4 * impl.d.n_embd / impl.s.tp),
        Vl(impl.Vl()),
        N(static_cast<size_t>(sl.B) * static_cast<size_t>(sl.T)),
        C_(static_cast<size_t>(C)),
        NC(N * C_),
        Ca_(static_cast<size_t>(Ca)),
        F_(static_cast<size_t>(F)),
        n_(static_cast<int>(N)),
        Nl(static_cast<long>(N)),
        rank0(impl.s.tp_rank == 0),
        first(impl.s.first_stage()),
        last(impl.s.last_stage()),
        pos(sl.has_positions ? a.h.positions : nullptr) {}

  S* W(int i, int l) { return m.LP<S>(i, l); }
  S* dW(int i, int l) { return m.LG<S>(i, l); }
  // Row-parallel biases are added on TP rank 0 only (the all-reduce adds the other ranks' parts).
  S* row_bias(int i, int l) { return rank0 ? W(i, l) : nullptr; }
  const S* block_input(int l) const { return l == 0 ? a.encoded : a.residual3(l - 1); }
  S* gelu_out(int l) const { return m.opt.keep_gelu ? a.fch_gelu(l) : a.gelu; }
  void reduce(S* x) {  // f and g of Megatron: the sum over the TP group of an (N, C) activation
    if (m.s.tp > 1) m.tp_reduce<S>(x, NC, a.h.tp_sum);
  }
  void from_f32(S* dst, const float* src) {  // a stage boundary's fp32 (N, C) into S
    if constexpr (sizeof(S) == sizeof(float))
      be.copy(dst, src, NC * sizeof(float));
    else
      be.convert(dst, src, NC);
  }

  // Block l's forward from ln1 (already computed) up to the MLP activation; shared by the forward
  // and the rebuild before the backward under recomputation.
  void block_up_to_mlp(int l) {
    be.matmul_forward(a.qkv(l), a.ln1(l), W(kQkvw, l), W(kQkvb, l), n_, C, 3 * Ca, static_cast<S*>(nullptr));
    if (m.kv.active)
      be.attention_cached_forward(a.atty(l), a.qkv(l), m.kv_k<S>(l), m.kv_v<S>(l), pos, m.kv.row0, B, T, NH,
                                  NH, Ca / NH, m.kv.len);
    else
      be.attention_forward(a.atty(l), a.att_lse(l), a.qkv(l), pos, B, T, NH, NH, Ca / NH);
    be.matmul_forward(a.proj, a.atty(l), W(kAttprojw, l), row_bias(kAttprojb, l), n_, Ca, C,
                      static_cast<S*>(nullptr));
    reduce(a.proj);  // g
    be.residual_layernorm_forward(a.residual2(l), a.ln2(l), a.ln2_mean(l), a.ln2_rstd(l), block_input(l),
                                  a.proj, W(kLn2w, l), W(kLn2b, l), Nl, C);
    if (m.opt.keep_gelu && m.opt.fuse_gelu) {
      be.matmul_forward(a.fch(l), a.ln2(l), W(kFcw, l), W(kFcb, l), n_, C, F, a.fch_gelu(l));
    } else {
      be.matmul_forward(a.fch(l), a.ln2(l), W(kFcw, l), W(kFcb, l), n_, C, F, static_cast<S*>(nullptr));
      be.gelu_forward(gelu_out(l), a.fch(l), N * F_);
    }
    if (!m.opt.keep_gelu) sl.gelu_layer = l;
  }

  HeadBuffers<S> head_buffers() {
    HeadBuffers<S> hb;
    hb.lnf = a.lnf;
    hb.weight = m.P<S>(kWte);
    hb.dweight = m.G<S>(kWte);
    hb.logits = a.logits;
    hb.losses = a.losses;
    hb.lse = a.loss_lse;
    hb.dln = a.dln;
    return hb;
  }

  float forward(const float* stage_in, const int32_t* host_targets) {
    if (first)
      m.embed_forward<S>(a.h, a.encoded, m.P<S>(kWte), m.P<S>(kWpe), pos, B, T, a.h.tp_sum);
    else
      from_f32(a.encoded, stage_in);
    be.layernorm_forward(a.ln1(0), a.ln1_mean(0), a.ln1_rstd(0), a.encoded, W(kLn1w, 0), W(kLn1b, 0), Nl, C);
    for (int l = 0; l < L; ++l) {
      block_up_to_mlp(l);
      be.matmul_forward(a.proj, gelu_out(l), W(kFcprojw, l), row_bias(kFcprojb, l), n_, F, C,
                        static_cast<S*>(nullptr));
      reduce(a.proj);  // g
      // residual3 = residual2 + proj, fused with the next LayerNorm (the next block's ln1, or lnf);
      // a non-last stage's last block hands the plain sum to the next stage.
      if (l + 1 < L)
        be.residual_layernorm_forward(a.residual3(l), a.ln1(l + 1), a.ln1_mean(l + 1), a.ln1_rstd(l + 1),
                                      a.residual2(l), a.proj, W(kLn1w, l + 1), W(kLn1b, l + 1), Nl, C);
      else if (last)
        be.residual_layernorm_forward(a.residual3(l), a.lnf, a.lnf_mean, a.lnf_rstd, a.residual2(l), a.proj,
                                      m.P<S>(kLnfw), m.P<S>(kLnfb), Nl, C);
      else
        be.residual_forward(a.residual3(l), a.residual2(l), a.proj, NC);
    }
    if (m.recompute) {  // the block region holds this forward's last block
      m.block_slot = static_cast<int>(&sl - m.slots.data());
      m.block_layer = L - 1;
    }
    if (!last) {
      if constexpr (sizeof(S) != sizeof(float)) be.convert(a.h.out_f32, a.residual3(L - 1), NC);
      be.synchronize();
      return -1.0f;
    }
    // The LM head and loss, chunk by chunk of rows (the fused LM head: vocab_parallel.cpp).
    return m.head_forward<S>(sl, a.h, head_buffers(), host_targets);
  }

  void backward(const float* dout, float loss_scale) {
    const int slot = static_cast<int>(&sl - m.slots.data());
    if (last) {
      // Loss -> logits (in place) -> final LayerNorm.
      m.head_backward<S>(sl, a.h, head_buffers(), loss_scale);
      reduce(a.dln);  // f of the vocab-parallel head
      be.fill_zero_bytes(a.dresidual, NC * sizeof(S));
      be.layernorm_backward(a.dresidual, m.G<S>(kLnfw), m.G<S>(kLnfb), a.dln, a.residual3(L - 1),
                            m.P<S>(kLnfw), a.lnf_mean, a.lnf_rstd, Nl, C);
    } else {
      from_f32(a.dresidual, dout);
    }
    // dresidual holds d(residual3[l]) on entry to layer l and d(residual3[l-1]) on exit.
    for (int l = L - 1; l >= 0; --l) {
      if (m.recompute && (m.block_slot != slot || m.block_layer != l)) {
        // Rebuild block l from its input with the forward's own kernels: the same bits (the fused
        // residual+LayerNorm of the forward normalised the residual after rounding it to S).
        be.layernorm_forward(a.ln1(l), a.ln1_mean(l), a.ln1_rstd(l), block_input(l), W(kLn1w, l), W(kLn1b, l),
                             Nl, C);
        block_up_to_mlp(l);
        m.block_slot = slot;
        m.block_layer = l;
      }
      // MLP block: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2)))).
      if (!m.opt.keep_gelu && sl.gelu_layer != l) be.gelu_forward(a.gelu, a.fch(l), N * F_);
      sl.gelu_layer = -1;
      be.matmul_backward(a.dbig, dW(kFcprojw, l), dW(kFcprojb, l), a.dresidual, gelu_out(l), W(kFcprojw, l),
                         n_, F, C);
      be.gelu_backward(a.dbig, a.fch(l), a.dbig, N * F_);
      be.matmul_backward(a.dln, dW(kFcw, l), dW(kFcb, l), a.dbig, a.ln2(l), W(kFcw, l), n_, C, F);
      reduce(a.dln);  // f
      be.layernorm_backward(a.dresidual, dW(kLn2w, l), dW(kLn2b, l), a.dln, a.residual2(l), W(kLn2w, l),
                            a.ln2_mean(l), a.ln2_rstd(l), Nl, C);
      // Attention block: residual2 = residual + attproj(attention(qkv(ln1(residual)))).
      be.matmul_backward(a.proj, dW(kAttprojw, l), dW(kAttprojb, l), a.dresidual, a.atty(l), W(kAttprojw, l),
                         n_, Ca, C);
      be.attention_backward(a.dbig, a.proj, a.qkv(l), a.atty(l), a.att_lse(l), pos, B, T, NH, NH, Ca / NH);
      be.matmul_backward(a.dln, dW(kQkvw, l), dW(kQkvb, l), a.dbig, a.ln1(l), W(kQkvw, l), n_, C, 3 * Ca);
      reduce(a.dln);  // f
      be.layernorm_backward(a.dresidual, dW(kLn1w, l), dW(kLn1b, l), a.dln, block_input(l), W(kLn1w, l),
                            a.ln1_mean(l), a.ln1_rstd(l), Nl, C);
      if (m.layer_hook) m.layer_hook(l);
    }
    if (first)
      m.embed_backward<S>(a.h, m.G<S>(kWte), m.G<S>(kWpe), a.dresidual, pos, B, T);
    else if constexpr (sizeof(S) != sizeof(float))
      be.convert(a.h.dinput_f32, a.dresidual, NC);
    if (m.layer_hook) m.layer_hook(-1);
    be.synchronize();
  }
};

}  // namespace

ActivationSizes activation_sizes(const ActivationPlan& p) {
  if (p.bf16()) {
    Acts<bf16_t> unused;
    return carve<bf16_t>(p, nullptr, nullptr, &unused);
  }
  Acts<float> unused;
  return carve<float>(p, nullptr, nullptr, &unused);
}

template <typename S>
float forward(Model::Impl& m, int slot, const float* stage_in, const int32_t* host_targets) {
  return Pass<S>(m, slot).forward(stage_in, host_targets);
}

template <typename S>
void backward(Model::Impl& m, int slot, const float* dout, float loss_scale) {
  Pass<S>(m, slot).backward(dout, loss_scale);
}

template <typename S>
float* stage_output(Model::Impl& m, int slot) {
  const Acts<S> a = slot_acts<S>(m, slot);
  if constexpr (sizeof(S) == sizeof(float))
    return a.residual3(m.s.local_layers() - 1);
  else
    return a.h.out_f32;
}

template <typename S>
float* stage_input_grad(Model::Impl& m, int slot) {
  const Acts<S> a = slot_acts<S>(m, slot);
  if constexpr (sizeof(S) == sizeof(float))
    return a.dresidual;
  else
    return a.h.dinput_f32;
}

template <typename S>
S* logits(Model::Impl& m, int slot) {
  return m.slot_logits<S>(m.slot(slot), slot_acts<S>(m, slot).logits);
}

void init_tensor(const ModelDims& d, int i, float* t, size_t n, uint64_t seed) {
  const float kStd = 0.02f;
  const float resid_std = kStd / std::sqrt(2.0f * static_cast<float>(d.n_layer));
  const auto tensor = static_cast<uint64_t>(i);
  switch (i) {
    case kWte: {  // real vocabulary rows only; padding rows stay zero
      const size_t real = static_cast<size_t>(d.vocab_size) * static_cast<size_t>(d.n_embd);
      fill_normal(t, real, kStd, seed, tensor);
      std::fill(t + real, t + n, 0.0f);
      break;
    }
    case kWpe:
    case kQkvw:
    case kFcw:
      fill_normal(t, n, kStd, seed, tensor);
      break;
    case kAttprojw:
    case kFcprojw:
      fill_normal(t, n, resid_std, seed, tensor);
      break;
    case kLn1w:
    case kLn2w:
    case kLnfw:
      std::fill(t, t + n, 1.0f);
      break;
    default:  // biases
      std::fill(t, t + n, 0.0f);
      break;
  }
}

#define FLOTILLA_INSTANTIATE(S)                                               \
  template float forward<S>(Model::Impl&, int, const float*, const int32_t*); \
  template void backward<S>(Model::Impl&, int, const float*, float);          \
  template float* stage_output<S>(Model::Impl&, int);                         \
  template float* stage_input_grad<S>(Model::Impl&, int);                     \
  template S* logits<S>(Model::Impl&, int);
FLOTILLA_INSTANTIATE(float)
FLOTILLA_INSTANTIATE(bf16_t)
#undef FLOTILLA_INSTANTIATE

}  // namespace flotilla::gpt2
