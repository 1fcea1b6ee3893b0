// The Llama family's training step (Llama 3, Qwen 2/3, SmolLM2, Mistral-style) as an explicit
// sequence of backend kernels, for the whole model or one tensor/pipeline shard, fp32 or bf16.
//
// Per block, pre-norm: h = x + o(attn(rope(qk_norm(qkv(rms1(x)))))), out = h +
// down(swiglu(gate_up(rms2(h)))). Tensor parallelism as for GPT-2 (gpt2_pass.cpp): q/k/v heads (whole K/V
// groups per rank) and gate/up columns are column-parallel with f in front; o and down are row-parallel with
// g behind. Non-obvious decisions:
// - q, k and v come from one fused matmul and RoPE rotates q and k in place in its output, so
//   attention reads the rotated values the backward needs and nothing else is stored; the
//   backward un-rotates d(q), d(k) in place before the matmul's backward.
// - Qwen 3's q/k RMSNorm weights are replicated over TP but each rank normalises only its own
//   heads, so their gradient (unlike every other replicated tensor's) differs between TP ranks:
//   each micro-batch's contribution is summed over the TP group before it is accumulated.
// - The SwiGLU output follows GPT-2's GELU policy (ModelOptions::keep_gelu): kept per layer, or
//   one scratch buffer recomputed in backward for every layer but the last.
// - LoRA (lora.h) adds s * (drop(x) A^T) B^T into the adapted projection's output columns right
//   after the base matmul (before the qk-norm, RoPE or the row-parallel reduce), and its backward
//   adds the adapter's input gradient into the base's right after the base matmul's backward
//   (before the column-parallel reduce), so the tensor-parallel all-reduces carry both. Its products
//   (Backend::lora_gemm) read and accumulate into the base tensors' columns in place through leading
//   dimensions, and the scale s rides on the small u = s drop(x) A^T (N x r), so no (N x out) slice is
//   copied or scaled anywhere. The frozen
//   base computes no weight gradient, and with a frozen embedding nothing is propagated below the
//   first layer's attention input.
// - QLoRA (lora.nf4) holds each projection module quantised on its own (base_weights.h), so a fused
//   projection is one Backend::nf4_matmul_* per module writing its columns of the fused output in
//   place (leading dimension = the fused width), and the fused input gradient is the modules' sum
//   (accumulate); everything after the base matmul, LoRA included, is unchanged.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/core/lora_mask.h"
#include "engine/model/llama.h"
#include "engine/model/model_impl.h"

namespace flotilla::llama {
namespace {

// Local widths of one shard: Hl, KVl heads of hd, Ql = Hl*hd, Dl = (Hl + 2 KVl) * hd, Fl = F/tp.
struct Widths {
  int C, hd, Hl, KVl, Ql, Dl, Fl, Vl;
  explicit Widths(const ModelDims& d, const ModelShard& s)
      : C(d.n_embd),
        hd(d.hd()),
        Hl(d.n_head / s.tp),
        KVl(d.kv_heads() / s.tp),
        Ql(Hl * d.hd()),
        Dl((Hl + 2 * KVl) * d.hd()),
        Fl(d.ffn() / s.tp),
        Vl(d.padded_vocab / s.tp) {}
};

template <typename S>
struct Acts {
  SlotHead h;
  // Per layer (recomputable; one layer in the block region under recomputation).
  S* ln1_ = nullptr;          // (L, N, C)    rms1 output
  float* rstd1_ = nullptr;    // (L, N)
  S* qkv_raw_ = nullptr;      // (L, N, Dl)   matmul output before the q/k norm (qk_norm only)
  float* qk_rstd_ = nullptr;  // (L, N, Hl + KVl)  (qk_norm only)
  S* qkv_ = nullptr;          // (L, N, Dl)   attention input: normed and rotated q, k; v
  S* atty_ = nullptr;         // (L, N, Ql)
  float* lse_ = nullptr;      // (L, B, Hl, T)
  S* residual2_ = nullptr;    // (L, N, C)
  S* ln2_ = nullptr;          // (L, N, C)
  float* rstd2_ = nullptr;    // (L, N)
  S* gate_up_ = nullptr;      // (L, N, 2Fl)
  S* act_ = nullptr;          // (L, N, Fl)   swiglu output (keep_gelu only)
  S* residual3_ = nullptr;    // (L, N, C)    block outputs, always per layer
  // Once.
  S* encoded = nullptr;       // (N, C)
  S* lnf = nullptr;           // (N, C)
  float* lnf_rstd = nullptr;  // (N)
  S* logits = nullptr;        // (chunk rows, Vl) one chunk of the head (N without chunking)
  float* losses = nullptr;    // (N)
  float* loss_lse = nullptr;  // (N)
  // Scratch.
  S* act = nullptr;        // (N, Fl)  swiglu output of one layer (without keep_gelu)
  S* dact = nullptr;       // (N, Fl)
  S* proj = nullptr;       // (N, max(C, Ql)): o / down output; d atty in backward
  S* dresidual = nullptr;  // (N, C)
  S* dln = nullptr;        // (N, C)
  S* dbig = nullptr;       // (N, max(2Fl, Dl)): d gate_up, or d qkv
  S* dqk_norm = nullptr;   // (2 hd): one micro-batch's q/k norm weight gradient (qk_norm, tp > 1)
  // LoRA (nt targets of rank r).
  S* lu_ = nullptr;          // (L, nt, N, r)  u = s drop(x) A^T per target (a partial sum for o, down under TP)
  S* lx = nullptr;           // (N, max in)    the dropped-out adapter input (dropout > 0)
  S* ldu = nullptr;          // (N, r)         d u
  S* ldx = nullptr;          // (N, max in)    the adapter's input gradient (dropout > 0)
  S* ltp = nullptr;          // one layer's TP-partial adapter gradients (tp > 1)
  float* ltp_f32 = nullptr;  // their fp32 sum buffer (bf16, tp > 1)
  size_t ltp_n = 0;
  size_t n = 0, nc = 0, nd = 0, nq = 0, nf2 = 0, nf = 0, nr = 0, lse_per = 0, ks = 1, nu = 0, lnt = 0;

  S* ln1(int l) const { return ln1_ + ks * l * nc; }
  float* rstd1(int l) const { return rstd1_ + ks * l * n; }
  S* qkv_raw(int l) const { return qkv_raw_ + ks * l * nd; }
  float* qk_rstd(int l) const { return qk_rstd_ + ks * l * nr; }
  S* qkv(int l) const { return qkv_ + ks * l * nd; }
  S* atty(int l) const { return atty_ + ks * l * nq; }
  float* lse(int l) const { return lse_ + ks * l * lse_per; }
  S* residual2(int l) const { return residual2_ + ks * l * nc; }
  S* ln2(int l) const { return ln2_ + ks * l * nc; }
  float* rstd2(int l) const { return rstd2_ + ks * l * n; }
  S* gate_up(int l) const { return gate_up_ + ks * l * nf2; }
  S* act_kept(int l) const { return act_ + ks * l * nf; }
  S* residual3(int l) const { return residual3_ + l * nc; }
  S* lu(int l, int k) const { return lu_ + ks * l * lnt * nu + static_cast<size_t>(k) * nu; }
};

// Where LoRA target t sits in this shard: its local input and output widths, and the columns of the
// base projection's output it adds into (rows ld elements apart, starting at col0).
struct LoraGeom {
  int in = 0, out = 0, ld = 0, col0 = 0;
};
LoraGeom lora_geom(const Widths& w, int t) {
  const int kv = (w.Dl - w.Ql) / 2;
  switch (t) {
    case kLoraQ:
      return {w.C, w.Ql, w.Dl, 0};
    case kLoraK:
      return {w.C, kv, w.Dl, w.Ql};
    case kLoraV:
      return {w.C, kv, w.Dl, w.Ql + kv};
    case kLoraO:
      return {w.Ql, w.C, w.C, 0};
    case kLoraGate:
      return {w.C, w.Fl, 2 * w.Fl, 0};
    case kLoraUp:
      return {w.C, w.Fl, 2 * w.Fl, w.Fl};
    default:
      return {w.Fl, w.C, w.C, 0};
  }
}

// Floats of one layer's TP-partial adapter gradients: A of each column-parallel target, B of each
// row-parallel one (replicated tensors whose per-rank gradient is a partial sum).
size_t lora_tp_partial_floats(const LoraSpec& lo, const Widths& w) {
  size_t n = 0;
  for (int t = 0; t < kNumLoraTargets; ++t) {
    if (!lo.has(t)) continue;
    const LoraGeom g = lora_geom(w, t);
    n += static_cast<size_t>(lo.rank) * static_cast<size_t>(lora_column_parallel(t) ? g.in : g.out);
  }
  return n;
}

template <typename S>
ActivationSizes carve(const ActivationPlan& p, void* base, void* block_base, Acts<S>* a) {
  const ModelDims& d = p.d;
  const ModelShard& s = p.s;
  const Widths w(d, s);
  const size_t L = static_cast<size_t>(s.local_layers()), N = p.N(), C = static_cast<size_t>(w.C);
  const size_t Dl = static_cast<size_t>(w.Dl), Ql = static_cast<size_t>(w.Ql), Fl = static_cast<size_t>(w.Fl);
  const size_t heads = static_cast<size_t>(w.Hl + w.KVl);
  const size_t Vl = s.last_stage() ? static_cast<size_t>(w.Vl) : 0, head = s.last_stage() ? 1 : 0;
  const size_t lse = static_cast<size_t>(p.B) * static_cast<size_t>(w.Hl) * static_cast<size_t>(p.T);
  const size_t qk = d.qk_norm ? 1 : 0;
  Carver c(base, p.align), block(block_base, p.align);
  a->h = carve_head(p, c);
  Carver& r = p.recompute ? block : c;
  const size_t Lr = p.recompute ? 1 : L;
  a->ln1_ = r.take<S>(Lr * N * C);
  a->rstd1_ = r.take<float>(Lr * N);
  a->qkv_raw_ = r.take<S>(qk * Lr * N * Dl);
  a->qk_rstd_ = r.take<float>(qk * Lr * N * heads);
  a->qkv_ = r.take<S>(Lr * N * Dl);
  a->atty_ = r.take<S>(Lr * N * Ql);
  a->lse_ = r.take<float>(Lr * lse);
  a->residual2_ = r.take<S>(Lr * N * C);
  a->ln2_ = r.take<S>(Lr * N * C);
  a->rstd2_ = r.take<float>(Lr * N);
  a->gate_up_ = r.take<S>(Lr * N * 2 * Fl);
  if (p.opt.keep_gelu) a->act_ = r.take<S>(Lr * N * Fl);
  a->residual3_ = c.take<S>(L * N * C);
  a->encoded = c.take<S>(N * C);
  a->lnf = c.take<S>(head * N * C);
  a->lnf_rstd = c.take<float>(head * N);
  a->logits = c.take<S>(p.logit_rows() * Vl);  // one chunk of rows (the fused LM head)
  a->losses = c.take<float>(head * N);
  a->loss_lse = c.take<float>(head * N);
  if (!p.opt.keep_gelu) a->act = c.take<S>(N * Fl);
  a->dact = c.take<S>(N * Fl);
  a->proj = c.take<S>(N * std::max(C, Ql));
  a->dresidual = c.take<S>(N * C);
  a->dln = c.take<S>(N * C);
  a->dbig = c.take<S>(N * std::max(2 * Fl, Dl));
  a->dqk_norm = c.take<S>(qk * (s.tp > 1 ? 2 : 0) * static_cast<size_t>(w.hd));
  const LoraSpec& lo = p.opt.lora;
  if (lo.enabled()) {
    const size_t rank = static_cast<size_t>(lo.rank), nt = static_cast<size_t>(lo.count());
    size_t max_in = 0;
    for (int t = 0; t < kNumLoraTargets; ++t)
      if (lo.has(t)) max_in = std::max(max_in, static_cast<size_t>(lora_geom(w, t).in));
    a->lu_ = r.take<S>(Lr * nt * N * rank);
    a->lx = c.take<S>(lo.dropout > 0.0f ? N * max_in : 0);
    a->ldu = c.take<S>(N * rank);
    a->ldx = c.take<S>(lo.dropout > 0.0f ? N * max_in : 0);
    a->ltp_n = s.tp > 1 ? lora_tp_partial_floats(lo, w) : 0;
    a->ltp = c.take<S>(a->ltp_n);
    if (p.bf16()) a->ltp_f32 = c.take<float>(a->ltp_n);
    a->nu = N * rank;
    a->lnt = nt;
  }
  a->n = N;
  a->nc = N * C;
  a->nd = N * Dl;
  a->nq = N * Ql;
  a->nf2 = N * 2 * Fl;
  a->nf = N * Fl;
  a->nr = N * heads;
  a->lse_per = lse;
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

template <typename S>
struct Pass {
  Model::Impl& m;
  Model::Impl::Slot& sl;
  Backend& be;
  const Acts<S> a;
  const Widths w;
  const int B, T, L, C;
  const size_t N, NC;
  const int n_;
  const long Nl;
  const float eps;
  const bool first, last, qk_norm;
  const int32_t* pos;
  const float* inv_freq;
  const LoraSpec& lo;
  const bool lora, frozen, q4;
  const float lscale;

  Pass(Model::Impl& impl, int slot)
      : m(impl),
        sl(impl.slot(slot)),
        be(*impl.be),
        a(slot_acts<S>(impl, slot)),
        w(impl.d, impl.s),
        B(sl.B),
        T(sl.T),
        L(impl.s.local_layers()),
        C(impl.d.n_embd),
        N(static_cast<size_t>(sl.B) * static_cast<size_t>(sl.T)),
        NC(N * static_cast<size_t>(impl.d.n_embd)),
        n_(static_cast<int>(N)),
        Nl(static_cast<long>(N)),
        eps(impl.d.norm_eps),
        first(impl.s.first_stage()),
        last(impl.s.last_stage()),
        qk_norm(impl.d.qk_norm),
        pos(sl.has_positions ? a.h.positions : nullptr),
        inv_freq(impl.rope.data()),
        lo(impl.opt.lora),
        lora(impl.opt.lora.enabled()),
        frozen(impl.base.frozen),
        q4(impl.nf4()),
        lscale(impl.opt.lora.enabled() ? impl.opt.lora.scale() : 0.0f) {}

  S* W(int i, int l) { return m.LP<S>(i, l); }
  S* dW(int i, int l) { return m.LG<S>(i, l); }
  S* bias(int l) { return m.base.sizes[kQkvBias] > 0 ? W(kQkvBias, l) : nullptr; }
  S* dbias(int l) { return m.base.sizes[kQkvBias] > 0 ? dW(kQkvBias, l) : nullptr; }
  const S* block_input(int l) const { return l == 0 ? a.encoded : a.residual3(l - 1); }
  S* act(int l) const { return m.opt.keep_gelu ? a.act_kept(l) : a.act; }
  void reduce(S* x) {
    if (m.s.tp > 1) m.tp_reduce<S>(x, NC, a.h.tp_sum);
  }
  void from_f32(S* dst, const float* src) {
    if constexpr (sizeof(S) == sizeof(float))
      be.copy(dst, src, NC * sizeof(float));
    else
      be.convert(dst, src, NC);
  }

  // --- The base projections: one matmul against the fused tensor, or under QLoRA one NF4 matmul per
  // module (kBaseModules), each writing its columns of the fused output (rows ld apart; the
  // module's columns are LoRA's geometry) and the input gradient summed over the modules. ---
  static void modules_of(int tensor, int* first, int* last) {
    switch (tensor) {
      case kQkv:
        *first = kLoraQ, *last = kLoraV;
        break;
      case kAttnOut:
        *first = *last = kLoraO;
        break;
      case kGateUp:
        *first = kLoraGate, *last = kLoraUp;
        break;
      default:
        *first = *last = kLoraDown;
        break;
    }
  }
  // y (N, out) = x (N, in) W^T (+ b) for base tensor `tensor` of layer l.
  void base_forward(int tensor, int l, S* y, const S* x, const S* b, int in, int out) {
    if (!q4) {
      be.matmul_forward(y, x, W(tensor, l), b, n_, in, out, static_cast<S*>(nullptr));
      return;
    }
    int t0 = 0, t1 = 0;
    modules_of(tensor, &t0, &t1);
    for (int t = t0; t <= t1; ++t) {
      const LoraGeom g = lora_geom(w, t);
      be.nf4_matmul_forward(y + g.col0, g.ld, x, m.qview(l, t), b != nullptr ? b + g.col0 : nullptr, n_);
    }
  }
  // dx (N, in) = dy W for base tensor `tensor` of layer l (dx null: not needed), and the frozen
  // base's weight gradient when it trains (never under QLoRA).
  void base_backward(int tensor, int l, S* dx, S* db, const S* dy, const S* x, int in, int out) {
    if (!q4) {
      be.matmul_backward(dx, dW(tensor, l), db, dy, x, W(tensor, l), n_, in, out);
      return;
    }
    if (dx == nullptr) return;
    int t0 = 0, t1 = 0;
    modules_of(tensor, &t0, &t1);
    for (int t = t0; t <= t1; ++t) {
      const LoraGeom g = lora_geom(w, t);
      be.nf4_matmul_backward(dx, dy + g.col0, g.ld, m.qview(l, t), n_, t != t0);
    }
  }

  // --- LoRA (lora.h) ---
  int lora_slot(int t) const {  // target t's index among the adapted targets
    int k = 0;
    for (int i = 0; i < t; ++i) k += lo.has(i) ? 1 : 0;
    return k;
  }
  // Target t's dropout mask in layer l on (N, g.in): a row-parallel target's input is this rank's
  // slice of columns, which draws its part of the whole input's mask.
  void drop(S* out, const S* in, int t, int l, const LoraGeom& g) {
    const bool sliced = !lora_column_parallel(t);
    be.dropout(out, in, Nl, g.in, lo.dropout, lora_mask_key(sl.drop_key, m.s.layer_begin + l, t),
               sliced ? g.in * m.s.tp : g.in, sliced ? g.in * m.s.tp_rank : 0);
  }
  // u = s * drop(x) A^T into its slot of layer l (x: the target's input, N rows of g.in). The scale
  // rides on u (N x r), so the products that read it (the output, B's gradient) need none.
  void lora_inner(int t, int l, const S* x, const LoraGeom& g) {
    const S* xin = x;
    if (sl.drop_key != 0) {
      drop(a.lx, x, t, l, g);
      xin = a.lx;
    }
    be.lora_gemm(false, true, n_, lo.rank, g.in, lscale, xin, g.in, m.LA<S>(t, l), g.in, 0.0f, a.lu(l, lora_slot(t)),
                 lo.rank);
  }
  // y[:, col0 : col0 + out] += s * (drop(x) A^T) B^T: target t of layer l, right after the base matmul,
  // accumulated straight into the base output's columns (rows g.ld apart).
  void lora_forward(int t, int l, const S* x, S* y) {
    if (!lora || !lo.has(t)) return;
    const LoraGeom g = lora_geom(w, t);
    lora_inner(t, l, x, g);
    be.lora_gemm(false, true, n_, g.out, lo.rank, 1.0f, a.lu(l, lora_slot(t)), lo.rank, m.LB<S>(t, l), lo.rank, 1.0f,
                 y + g.col0, g.ld);
  }
  // The TP-partial slot of target t's replicated adapter gradient within one layer (tp > 1).
  S* lora_partial(int t) {
    size_t off = 0;
    for (int i = 0; i < t; ++i) {
      if (!lo.has(i)) continue;
      const LoraGeom g = lora_geom(w, i);
      off += static_cast<size_t>(lo.rank) * static_cast<size_t>(lora_column_parallel(i) ? g.in : g.out);
    }
    return a.ltp + off;
  }
  // Backward of target t in layer l from dy (the base output's gradient; its columns col0.. read in place,
  // rows g.ld apart): the adapters' gradients, and, when dx is not null, the adapter's input gradient
  // added into dx (the base input's gradient, (N, g.in), already written by the base matmul's backward).
  void lora_backward(int t, int l, const S* x, const S* dy, S* dx) {
    if (!lora || !lo.has(t)) return;
    const LoraGeom g = lora_geom(w, t);
    const bool partial = m.s.tp > 1;  // this rank's A (column) or B (row) gradient is a partial sum
    S* u = a.lu(l, lora_slot(t));     // s * drop(x) A^T
    if (t == kLoraDown && m.recompute) lora_inner(t, l, x, g);  // not rebuilt with the block
    const S* dyt = dy + g.col0;
    // dB += dy^T (s u): B's gradient; du = s dy B.
    S* dB = partial && !lora_column_parallel(t) ? lora_partial(t) : m.dLB<S>(t, l);
    be.lora_gemm(true, false, g.out, lo.rank, n_, 1.0f, dyt, g.ld, u, lo.rank, 1.0f, dB, lo.rank);
    be.lora_gemm(false, false, n_, lo.rank, g.out, lscale, dyt, g.ld, m.LB<S>(t, l), lo.rank, 0.0f, a.ldu, lo.rank);
    // dA += du^T drop(x); dx += drop'(du A).
    const S* xin = x;
    if (sl.drop_key != 0) {
      drop(a.lx, x, t, l, g);
      xin = a.lx;
    }
    S* dA = partial && lora_column_parallel(t) ? lora_partial(t) : m.dLA<S>(t, l);
    be.lora_gemm(true, false, lo.rank, g.in, n_, 1.0f, a.ldu, lo.rank, xin, g.in, 1.0f, dA, g.in);
    if (dx == nullptr) return;
    if (sl.drop_key == 0) {
      be.lora_gemm(false, false, n_, g.in, lo.rank, 1.0f, a.ldu, lo.rank, m.LA<S>(t, l), g.in, 1.0f, dx, g.in);
      return;
    }
    be.lora_gemm(false, false, n_, g.in, lo.rank, 1.0f, a.ldu, lo.rank, m.LA<S>(t, l), g.in, 0.0f, a.ldx, g.in);
    drop(a.ldx, a.ldx, t, l, g);
    be.residual_forward(dx, dx, a.ldx, N * static_cast<size_t>(g.in));
  }
  // Under TP: zero the layer's partial-gradient slots first; after the layer, sum them over the TP
  // group once and add each into its adapter's gradient (the replicas stay bitwise equal).
  void lora_partials_begin() {
    if (lora && m.s.tp > 1) be.fill_zero_bytes(a.ltp, a.ltp_n * sizeof(S));
  }
  void lora_partials_end(int l) {
    if (!lora || m.s.tp == 1) return;
    float* f32 = a.ltp_f32 != nullptr ? a.ltp_f32 : reinterpret_cast<float*>(a.ltp);
    m.tp_reduce<S>(a.ltp, a.ltp_n, f32);
    for (int t = 0; t < kNumLoraTargets; ++t) {
      if (!lo.has(t)) continue;
      const LoraGeom g = lora_geom(w, t);
      const bool column = lora_column_parallel(t);
      S* grad = column ? m.dLA<S>(t, l) : m.dLB<S>(t, l);
      const size_t count = static_cast<size_t>(lo.rank) * static_cast<size_t>(column ? g.in : g.out);
      be.residual_forward(grad, grad, lora_partial(t), count);
    }
  }

  // Block l from ln1 (already computed) up to the SwiGLU output.
  void block_up_to_mlp(int l) {
    S* qkv_out = qk_norm ? a.qkv_raw(l) : a.qkv(l);
    base_forward(kQkv, l, qkv_out, a.ln1(l), bias(l), C, w.Dl);
    lora_forward(kLoraQ, l, a.ln1(l), qkv_out);
    lora_forward(kLoraK, l, a.ln1(l), qkv_out);
    lora_forward(kLoraV, l, a.ln1(l), qkv_out);
    if (qk_norm)
      be.qk_norm_forward(a.qkv(l), a.qk_rstd(l), a.qkv_raw(l), W(kQNorm, l), W(kKNorm, l), Nl, w.Hl, w.KVl,
                         w.hd, eps);
    be.rope_forward(a.qkv(l), pos, inv_freq, B, T, w.Hl, w.KVl, w.hd);
    if (m.kv.active)
      be.attention_cached_forward(a.atty(l), a.qkv(l), m.kv_k<S>(l), m.kv_v<S>(l), pos, m.kv.row0, B, T, w.Hl,
                                  w.KVl, w.hd, m.kv.len);
    else
      be.attention_forward(a.atty(l), a.lse(l), a.qkv(l), pos, B, T, w.Hl, w.KVl, w.hd);
    base_forward(kAttnOut, l, a.proj, a.atty(l), static_cast<const S*>(nullptr), w.Ql, C);
    lora_forward(kLoraO, l, a.atty(l), a.proj);
    reduce(a.proj);  // g
    be.residual_rmsnorm_forward(a.residual2(l), a.ln2(l), a.rstd2(l), block_input(l), a.proj, W(kMlpNorm, l),
                                Nl, C, eps);
    base_forward(kGateUp, l, a.gate_up(l), a.ln2(l), static_cast<const S*>(nullptr), C, 2 * w.Fl);
    lora_forward(kLoraGate, l, a.ln2(l), a.gate_up(l));
    lora_forward(kLoraUp, l, a.ln2(l), a.gate_up(l));
    be.swiglu_forward(act(l), a.gate_up(l), Nl, w.Fl);
    if (!m.opt.keep_gelu) sl.gelu_layer = l;
  }

  HeadBuffers<S> head_buffers() {
    HeadBuffers<S> hb;
    hb.lnf = a.lnf;
    hb.weight = m.P<S>(m.base.layout.head());
    hb.dweight = m.G<S>(m.base.layout.head());
    hb.logits = a.logits;
    hb.losses = a.losses;
    hb.lse = a.loss_lse;
    hb.dln = a.dln;
    return hb;
  }

  float forward(const float* stage_in, const int32_t* host_targets) {
    if (first)
      m.embed_forward<S>(a.h, a.encoded, m.P<S>(kEmbed), static_cast<const S*>(nullptr), pos, B, T,
                         a.h.tp_sum);
    else
      from_f32(a.encoded, stage_in);
    be.rmsnorm_forward(a.ln1(0), a.rstd1(0), a.encoded, W(kAttnNorm, 0), Nl, C, eps);
    for (int l = 0; l < L; ++l) {
      block_up_to_mlp(l);
      base_forward(kDown, l, a.proj, act(l), static_cast<const S*>(nullptr), w.Fl, C);
      lora_forward(kLoraDown, l, act(l), a.proj);
      reduce(a.proj);  // g
      if (l + 1 < L)
        be.residual_rmsnorm_forward(a.residual3(l), a.ln1(l + 1), a.rstd1(l + 1), a.residual2(l), a.proj,
                                    W(kAttnNorm, l + 1), Nl, C, eps);
      else if (last)
        be.residual_rmsnorm_forward(a.residual3(l), a.lnf, a.lnf_rstd, a.residual2(l), a.proj,
                                    m.P<S>(kFinalNorm), Nl, C, eps);
      else
        be.residual_forward(a.residual3(l), a.residual2(l), a.proj, NC);
    }
    if (m.recompute) {
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
      m.head_backward<S>(sl, a.h, head_buffers(), loss_scale);
      reduce(a.dln);  // f of the vocab-parallel head
      be.fill_zero_bytes(a.dresidual, NC * sizeof(S));
      be.rmsnorm_backward(a.dresidual, m.G<S>(kFinalNorm), a.dln, a.residual3(L - 1), m.P<S>(kFinalNorm),
                          a.lnf_rstd, Nl, C);
    } else {
      from_f32(a.dresidual, dout);
    }
    const size_t hd = static_cast<size_t>(w.hd);
    for (int l = L - 1; l >= 0; --l) {
      if (m.recompute && (m.block_slot != slot || m.block_layer != l)) {
        be.rmsnorm_forward(a.ln1(l), a.rstd1(l), block_input(l), W(kAttnNorm, l), Nl, C, eps);
        block_up_to_mlp(l);
        m.block_slot = slot;
        m.block_layer = l;
      }
      lora_partials_begin();
      // MLP: residual3 = residual2 + down(swiglu(gate_up(rms2(residual2)))).
      if (!m.opt.keep_gelu && sl.gelu_layer != l) be.swiglu_forward(a.act, a.gate_up(l), Nl, w.Fl);
      sl.gelu_layer = -1;
      base_backward(kDown, l, a.dact, static_cast<S*>(nullptr), a.dresidual, act(l), w.Fl, C);
      lora_backward(kLoraDown, l, act(l), a.dresidual, a.dact);
      be.swiglu_backward(a.dbig, a.dact, a.gate_up(l), Nl, w.Fl);
      base_backward(kGateUp, l, a.dln, static_cast<S*>(nullptr), a.dbig, a.ln2(l), C, 2 * w.Fl);
      lora_backward(kLoraGate, l, a.ln2(l), a.dbig, a.dln);
      lora_backward(kLoraUp, l, a.ln2(l), a.dbig, a.dln);
      reduce(a.dln);  // f
      be.rmsnorm_backward(a.dresidual, dW(kMlpNorm, l), a.dln, a.residual2(l), W(kMlpNorm, l), a.rstd2(l), Nl,
                          C);
      // Attention: residual2 = residual + o(attention(rope(qk_norm(qkv(rms1(residual)))))).
      base_backward(kAttnOut, l, a.proj, static_cast<S*>(nullptr), a.dresidual, a.atty(l), w.Ql, C);
      lora_backward(kLoraO, l, a.atty(l), a.dresidual, a.proj);
      be.attention_backward(a.dbig, a.proj, a.qkv(l), a.atty(l), a.lse(l), pos, B, T, w.Hl, w.KVl, w.hd);
      be.rope_backward(a.dbig, pos, inv_freq, B, T, w.Hl, w.KVl, w.hd);
      if (qk_norm) {
        if (m.s.tp == 1 || frozen) {  // frozen: no weight gradient, nothing to sum
          be.qk_norm_backward(a.dbig, dW(kQNorm, l), dW(kKNorm, l), a.dbig, a.qkv_raw(l), W(kQNorm, l),
                              W(kKNorm, l), a.qk_rstd(l), Nl, w.Hl, w.KVl, w.hd);
        } else {
          // Each rank normalised its own heads: sum this micro-batch's norm-weight gradient over TP.
          be.fill_zero_bytes(a.dqk_norm, 2 * hd * sizeof(S));
          be.qk_norm_backward(a.dbig, a.dqk_norm, a.dqk_norm + hd, a.dbig, a.qkv_raw(l), W(kQNorm, l),
                              W(kKNorm, l), a.qk_rstd(l), Nl, w.Hl, w.KVl, w.hd);
          m.tp_reduce<S>(a.dqk_norm, 2 * hd, a.h.tp_sum);
          be.residual_forward(dW(kQNorm, l), dW(kQNorm, l), a.dqk_norm, hd);
          be.residual_forward(dW(kKNorm, l), dW(kKNorm, l), a.dqk_norm + hd, hd);
        }
      }
      // A frozen embedding needs no gradient below the first layer: its input gradient is skipped.
      const bool below = !(first && frozen && l == 0);
      S* dln = below ? a.dln : static_cast<S*>(nullptr);
      base_backward(kQkv, l, dln, dbias(l), a.dbig, a.ln1(l), C, w.Dl);
      lora_backward(kLoraQ, l, a.ln1(l), a.dbig, dln);
      lora_backward(kLoraK, l, a.ln1(l), a.dbig, dln);
      lora_backward(kLoraV, l, a.ln1(l), a.dbig, dln);
      lora_partials_end(l);
      if (below) {
        reduce(a.dln);  // f
        be.rmsnorm_backward(a.dresidual, dW(kAttnNorm, l), a.dln, block_input(l), W(kAttnNorm, l), a.rstd1(l),
                            Nl, C);
      }
      if (m.layer_hook) m.layer_hook(l);
    }
    if (first) {  // a frozen embedding has no gradient, and the first stage sends nothing back
      if (!frozen) m.embed_backward<S>(a.h, m.G<S>(kEmbed), static_cast<S*>(nullptr), a.dresidual, pos, B, T);
    } else if constexpr (sizeof(S) != sizeof(float)) {
      be.convert(a.h.dinput_f32, a.dresidual, NC);
    }
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
  const float kStd = 0.02f;  // transformers' initializer_range default
  const auto tensor = static_cast<uint64_t>(i);
  switch (i) {
    case kEmbed:
    case kLmHead: {  // real vocabulary rows only; padding rows stay zero
      const size_t real = static_cast<size_t>(d.vocab_size) * static_cast<size_t>(d.n_embd);
      fill_normal(t, real, kStd, seed, tensor);
      std::fill(t + real, t + n, 0.0f);
      break;
    }
    case kQkv:
    case kAttnOut:
    case kGateUp:
    case kDown:
      fill_normal(t, n, kStd, seed, tensor);
      break;
    case kAttnNorm:
    case kMlpNorm:
    case kFinalNorm:
    case kQNorm:
    case kKNorm:
      std::fill(t, t + n, 1.0f);
      break;
    default:  // biases
      std::fill(t, t + n, 0.0f);
      break;
  }
}

std::vector<float> rope_inv_freq(const ModelDims& d) {
  // In fp32 as transformers computes it: 1 / theta^(2i / head_dim), then the scaling rule.
  const int D = d.hd(), half = D / 2;
  const float theta = static_cast<float>(d.rope_theta);
  std::vector<float> f(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i)
    f[static_cast<size_t>(i)] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(D));
  const RopeScaling& r = d.rope;
  if (r.type == "linear") {
    for (float& x : f) x = x / static_cast<float>(r.factor);
  } else if (r.type == "llama3") {
    // Wavelengths shorter than original/high_freq_factor keep their frequency, longer than
    // original/low_freq_factor are divided by factor, and those between blend the two.
    const float factor = static_cast<float>(r.factor), low = static_cast<float>(r.low_freq_factor);
    const float high = static_cast<float>(r.high_freq_factor);
    const float old_len = static_cast<float>(r.original_max_position);
    const float low_wavelen = old_len / low, high_wavelen = old_len / high;
    const float two_pi = 6.283185307179586f;
    for (float& x : f) {
      const float wavelen = two_pi / x;
      if (wavelen > low_wavelen) {
        x = x / factor;
      } else if (!(wavelen < high_wavelen)) {
        const float smooth = (old_len / wavelen - low) / (high - low);
        x = (1.0f - smooth) * x / factor + smooth * x;
      }
    }
  }
  return f;
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

}  // namespace flotilla::llama
