// CudaGpt's forward and backward: GptModel's kernel sequence (engine/model/gpt_pass.cpp) over
// device arenas, templated on the storage type, for one micro-batch in one slot of one stage.
//
// Non-obvious decisions:
// - The GELU output is kept per layer (GPU memory is plentiful next to the CPU case, and it saves
//   a recompute), the residual add is fused into the following LayerNorm
//   (residual_layernorm_forward), and the logits buffer is reused in place for d(logits), as in
//   the CPU model.
// - Tensor parallelism follows GptModel (gpt_pass.cpp, gpt_vocab_parallel.cpp) on the same shard
//   layout. The differences: the positional embedding is added on TP rank 0 before the
//   embedding's all-reduce (x + 0 is exact, so the sum is the same); the TP all-reduces block the
//   host until the NCCL stream is done (the next kernel needs their result anyway); bf16
//   activations are summed in fp32 (widened into a scratch buffer, rounded once); and the
//   cross-entropy's per-row statistics (every rank's log-sum-exp, the target logit) are combined
//   on the host, as the CPU model does.
// - Pipeline stages exchange fp32 (N, C) activations and gradients (bf16 is widened on the way
//   out and rounded on the way in), so the boundary is the CPU model's and the ProcessGroup needs
//   no bf16 type. A non-last stage ends with a plain residual add instead of the fused one.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "engine/cuda/attention.h"
#include "engine/cuda/encoder.h"
#include "engine/cuda/gelu.h"
#include "engine/cuda/gpt_cuda_impl.h"
#include "engine/cuda/layernorm.h"
#include "engine/cuda/matmul.h"
#include "engine/cuda/residual.h"
#include "engine/cuda/softmax_crossentropy.h"
#include "engine/parallel/process_group.h"

namespace flotilla::cuda {
namespace detail {

StageBuffers carve_stage_buffers(Arena& a, const GptDims& d, const GptShard& s, int B, int T_, bool use_bf16,
                                 size_t wte_floats) {
  StageBuffers b;
  if (s.pp == 1) return b;
  const size_t NC = static_cast<size_t>(B) * static_cast<size_t>(T_) * static_cast<size_t>(d.n_embd);
  if (!s.first_stage()) b.recv_act = a.take<float>(NC);
  if (!s.last_stage()) b.recv_grad = a.take<float>(NC);
  if (use_bf16 && s.has_wte()) b.tied_f32 = a.take<float>(wte_floats);
  return b;
}

namespace {

// One micro-batch's pass over this rank's shard: widths, and where each tensor and activation is.
template <typename S>
struct Pass {
  CudaGpt::Impl& m;
  Acts<S>& a;
  Context& c;
  const GptShard& sh;
  const int L, C, V, tpn;
  const bool tensor_parallel, rank0, first, last;
  // This rank's widths (the whole model without TP): attention columns and heads, MLP width,
  // vocabulary rows of wte.
  const int Ca, NH, F, Vl;
  const size_t N;
  const int n_;
  const long Nl;
  const size_t C_, NC, Ca_, F_, lse_per, qkv_w, att_w, fc_w;

  Pass(CudaGpt::Impl& impl, Acts<S>& acts)
      : m(impl),
        a(acts),
        c(*impl.ctx),
        sh(impl.sh),
        L(sh.local_layers()),
        C(impl.d.n_embd),
        V(impl.d.vocab_size),
        tpn(sh.tp),
        tensor_parallel(sh.tp > 1),
        rank0(sh.tp_rank == 0),
        first(sh.first_stage()),
        last(sh.last_stage()),
        Ca(C / tpn),
        NH(impl.d.n_head / tpn),
        F(4 * C / tpn),
        Vl(impl.d.padded_vocab / tpn),
        N(static_cast<size_t>(impl.B) * static_cast<size_t>(impl.T)),
        n_(static_cast<int>(N)),
        Nl(static_cast<long>(N)),
        C_(static_cast<size_t>(C)),
        NC(N * C_),
        Ca_(static_cast<size_t>(Ca)),
        F_(static_cast<size_t>(F)),
        lse_per(static_cast<size_t>(NH) * N),
        qkv_w(3 * Ca_ * C_),
        att_w(C_ * Ca_),
        fc_w(F_ * C_) {}

  S* lp(int i, int l, size_t per) { return m.P<S>(i) + static_cast<size_t>(l) * per; }
  S* lg(int i, int l, size_t per) { return m.LG<S>(i, l, per); }
  // Row-parallel biases are added on TP rank 0 only (the all-reduce adds the other ranks' parts).
  S* row_bias(int i, int l) { return rank0 ? lp(i, l, C_) : nullptr; }
  // Block activations of local layer l live in slot k(l): l, or 0 with recompute. The residual
  // stream (residual3) is indexed by l directly: it is kept for every layer either way.
  int k(int l) const { return m.opt.recompute ? 0 : l; }
  S* at(S* base, int l, size_t per) { return base + static_cast<size_t>(k(l)) * per; }
  float* atf(float* base, int l, size_t per) { return base + static_cast<size_t>(k(l)) * per; }
  S* res3(int l) { return a.residual3 + static_cast<size_t>(l) * NC; }
  const S* block_input(int l) { return l == 0 ? a.encoded : res3(l - 1); }
  int ce_real() const { return tensor_parallel ? std::clamp(V - sh.tp_rank * Vl, 0, Vl) : V; }
  // f and g of Megatron: the sum over the TP group of an (N, C) activation.
  void reduce(S* x) {
    if (tensor_parallel) m.tp_all_reduce<S>(x, NC, a.tp_sum);
  }
  // (N, C) fp32 device values into an S buffer, or out of one.
  void from_f32(S* dst, const float* src) {
    if constexpr (sizeof(S) == sizeof(float))
      check_cuda(cudaMemcpyAsync(dst, src, NC * sizeof(float), cudaMemcpyDeviceToDevice, c.stream()),
                 "cudaMemcpyAsync (stage boundary)");
    else
      convert(c, dst, src, NC);
  }

  // Token ids to the slot's device buffers: the first stage embeds inputs, the last reads targets.
  // Under TP they become rows of this rank's wte slice, -1 where another rank holds the row
  // (encoder.h, softmax_crossentropy.h).
  void upload_ids(const int32_t* inputs, const int32_t* targets) {
    auto check = [&](const int32_t* ids, const char* what) {
      for (size_t i = 0; i < N; ++i)
        if (ids[i] < 0 || ids[i] >= V)
          throw_data(std::string(what) + " token id outside the vocabulary at position " + std::to_string(i));
    };
    auto upload = [&](int32_t* dst, const int32_t* ids, int real, std::vector<int32_t>& local) {
      const int32_t* src = ids;
      if (tensor_parallel) {
        const int lo = sh.tp_rank * Vl;
        local.resize(N);
        for (size_t i = 0; i < N; ++i) local[i] = ids[i] >= lo && ids[i] < lo + real ? ids[i] - lo : -1;
        src = local.data();
      }
      check_cuda(cudaMemcpyAsync(dst, src, N * sizeof(int32_t), cudaMemcpyHostToDevice, c.stream()),
                 "cudaMemcpyAsync (token ids)");
    };
    if (first) {
      check(inputs, "input");
      upload(a.inputs, inputs, Vl, m.ids_in);
    }
    if (last) {
      check(targets, "target");
      upload(a.targets, targets, ce_real(), m.ids_out);
    }
    // The host vectors are reused by the next call: the copies must have read them.
    if (tensor_parallel) c.synchronize();
  }

  // The block's forward from ln1 (already computed) up to the MLP activation; shared by the
  // forward pass and the rebuild before the backward under recompute.
  void block_up_to_mlp(int l) {
    matmul_forward<S>(c, at(a.qkv, l, 3 * N * Ca_), at(a.ln1, l, NC), lp(kQkvw, l, qkv_w),
                      lp(kQkvb, l, 3 * Ca_), n_, C, 3 * Ca);
    attention_forward<S>(c, at(a.atty, l, N * Ca_), atf(a.att_lse, l, lse_per), at(a.qkv, l, 3 * N * Ca_),
                         m.B, m.T, Ca, NH);
    matmul_forward<S>(c, a.proj, at(a.atty, l, N * Ca_), lp(kAttprojw, l, att_w), row_bias(kAttprojb, l), n_,
                      Ca, C);
    reduce(a.proj);
    residual_layernorm_forward<S>(c, at(a.residual2, l, NC), at(a.ln2, l, NC), atf(a.ln2_mean, l, N),
                                  atf(a.ln2_rstd, l, N), block_input(l), a.proj, lp(kLn2w, l, C_),
                                  lp(kLn2b, l, C_), Nl, C);
    if (m.opt.fuse_gelu) {
      matmul_forward<S>(c, at(a.fch, l, N * F_), at(a.ln2, l, NC), lp(kFcw, l, fc_w), lp(kFcb, l, F_), n_, C,
                        F, at(a.fch_gelu, l, N * F_));
    } else {
      matmul_forward<S>(c, at(a.fch, l, N * F_), at(a.ln2, l, NC), lp(kFcw, l, fc_w), lp(kFcb, l, F_), n_, C,
                        F);
      gelu_forward<S>(c, at(a.fch_gelu, l, N * F_), at(a.fch, l, N * F_), N * F_);
    }
  }

  float forward(const float* stage_in) {
    if (first) {
      encoder_forward<S>(c, a.encoded, a.inputs, m.P<S>(kWte), rank0 ? m.P<S>(kWpe) : nullptr, m.B, m.T, C);
      reduce(a.encoded);
    } else {
      from_f32(a.encoded, stage_in);
    }
    layernorm_forward<S>(c, a.ln1, a.ln1_mean, a.ln1_rstd, a.encoded, m.P<S>(kLn1w), m.P<S>(kLn1b), Nl, C);
    for (int l = 0; l < L; ++l) {
      block_up_to_mlp(l);
      matmul_forward<S>(c, a.proj, at(a.fch_gelu, l, N * F_), lp(kFcprojw, l, fc_w), row_bias(kFcprojb, l),
                        n_, F, C);
      reduce(a.proj);
      // residual3 = residual2 + proj, fused with the next LayerNorm (the next layer's ln1, or lnf);
      // a non-last stage's last block hands the plain sum to the next stage.
      if (l + 1 < L)
        residual_layernorm_forward<S>(c, res3(l), at(a.ln1, l + 1, NC), atf(a.ln1_mean, l + 1, N),
                                      atf(a.ln1_rstd, l + 1, N), at(a.residual2, l, NC), a.proj,
                                      lp(kLn1w, l + 1, C_), lp(kLn1b, l + 1, C_), Nl, C);
      else if (last)
        residual_layernorm_forward<S>(c, res3(l), a.lnf, a.lnf_mean, a.lnf_rstd, at(a.residual2, l, NC),
                                      a.proj, m.P<S>(kLnfw), m.P<S>(kLnfb), Nl, C);
      else
        residual_forward<S>(c, res3(l), at(a.residual2, l, NC), a.proj, NC);
    }
    if (!last) {
      if constexpr (sizeof(S) != sizeof(float)) convert(c, a.out_f32, res3(L - 1), NC);
      return -1.0f;
    }
    matmul_forward<S>(c, a.logits, a.lnf, m.P<S>(kWte), static_cast<const S*>(nullptr), n_, C, Vl);
    if (tensor_parallel)
      m.vp_crossentropy_forward<S>(a);
    else
      softmax_crossentropy_forward<S>(c, a.losses, a.loss_lse, a.logits, a.targets, Nl, V, m.d.padded_vocab);
    return static_cast<float>(sum_losses(c, a.losses, Nl) / static_cast<double>(N));
  }

  void backward(const float* dout, float loss_scale) {
    if (last) {
      // dloss = loss_scale/N per row, as GptModel::backward(loss_scale). Under TP the kernel runs
      // on this rank's real columns with the global lse; rows whose target another rank holds get
      // no one-hot.
      softmax_crossentropy_backward<S>(c, a.logits, a.logits, a.loss_lse, a.targets,
                                       loss_scale / static_cast<float>(N), Nl, ce_real(), Vl);
      matmul_backward<S>(c, a.dln, m.G<S>(kWte), static_cast<S*>(nullptr), a.logits, a.lnf, m.P<S>(kWte), n_,
                         C, Vl);
      reduce(a.dln);
      check_cuda(cudaMemsetAsync(a.dresidual, 0, NC * sizeof(S), c.stream()), "cudaMemsetAsync (dresidual)");
      layernorm_backward<S>(c, a.dresidual, m.G<S>(kLnfw), m.G<S>(kLnfb), a.dln, res3(L - 1), m.P<S>(kLnfw),
                            a.lnf_mean, a.lnf_rstd, Nl, C);
    } else {
      from_f32(a.dresidual, dout);
    }
    for (int l = L - 1; l >= 0; --l) {
      if (m.opt.recompute) {
        // Rebuild the block's activations from its stored input. LayerNorm of the stored residual
        // gives the bits the fused residual+LayerNorm kernel produced in the forward (it
        // normalises the residual after rounding it to S), so recompute on and off train
        // identically.
        layernorm_forward<S>(c, at(a.ln1, l, NC), atf(a.ln1_mean, l, N), atf(a.ln1_rstd, l, N),
                             block_input(l), lp(kLn1w, l, C_), lp(kLn1b, l, C_), Nl, C);
        block_up_to_mlp(l);
      }
      matmul_backward<S>(c, a.dbig, lg(kFcprojw, l, fc_w), lg(kFcprojb, l, C_), a.dresidual,
                         at(a.fch_gelu, l, N * F_), lp(kFcprojw, l, fc_w), n_, F, C);
      gelu_backward<S>(c, a.dbig, at(a.fch, l, N * F_), a.dbig, N * F_);
      matmul_backward<S>(c, a.dln, lg(kFcw, l, fc_w), lg(kFcb, l, F_), a.dbig, at(a.ln2, l, NC),
                         lp(kFcw, l, fc_w), n_, C, F);
      reduce(a.dln);
      layernorm_backward<S>(c, a.dresidual, lg(kLn2w, l, C_), lg(kLn2b, l, C_), a.dln, at(a.residual2, l, NC),
                            lp(kLn2w, l, C_), atf(a.ln2_mean, l, N), atf(a.ln2_rstd, l, N), Nl, C);
      matmul_backward<S>(c, a.proj, lg(kAttprojw, l, att_w), lg(kAttprojb, l, C_), a.dresidual,
                         at(a.atty, l, N * Ca_), lp(kAttprojw, l, att_w), n_, Ca, C);
      attention_backward<S>(c, a.dbig, a.proj, at(a.qkv, l, 3 * N * Ca_), at(a.atty, l, N * Ca_),
                            atf(a.att_lse, l, lse_per), m.B, m.T, Ca, NH);
      matmul_backward<S>(c, a.dln, lg(kQkvw, l, qkv_w), lg(kQkvb, l, 3 * Ca_), a.dbig, at(a.ln1, l, NC),
                         lp(kQkvw, l, qkv_w), n_, C, 3 * Ca);
      reduce(a.dln);
      layernorm_backward<S>(c, a.dresidual, lg(kLn1w, l, C_), lg(kLn1b, l, C_), a.dln, block_input(l),
                            lp(kLn1w, l, C_), atf(a.ln1_mean, l, N), atf(a.ln1_rstd, l, N), Nl, C);
      if (m.zero2) m.zero2_layer_done<S>(l);
      if (m.hook) m.hook(l);  // local layer l's gradients are final on the stream
    }
    if (m.zero2) m.zero2_backward_done();
    if (first) {
      encoder_backward<S>(c, m.G<S>(kWte), m.G<S>(kWpe), a.dresidual, a.inputs, m.B, m.T, C);
    } else if constexpr (sizeof(S) != sizeof(float)) {
      convert(c, a.dinput_f32, a.dresidual, NC);
    }
    if (m.hook) m.hook(-1);
  }
};

}  // namespace
}  // namespace detail

template <typename S>
void CudaGpt::Impl::tp_all_reduce(S* x, size_t count, float* f32) {
  Context& c = *ctx;
  opt.tp->set_device_stream(c.stream());  // the NCCL stream waits for the kernels that wrote x
  if constexpr (sizeof(S) == sizeof(float)) {
    (void)f32;
    opt.tp->all_reduce(reinterpret_cast<float*>(x), count);
  } else {
    convert(c, f32, x, count);
    opt.tp->all_reduce(f32, count);
    convert(c, x, f32, count);
  }
}

template <typename S>
void CudaGpt::Impl::vp_crossentropy_forward(Acts<S>& a) {
  Context& c = *ctx;
  const size_t N = static_cast<size_t>(B) * static_cast<size_t>(T), tpn = static_cast<size_t>(sh.tp);
  const int Vl = d.padded_vocab / sh.tp, lo = sh.tp_rank * Vl;
  const int real = std::clamp(d.vocab_size - lo, 0, Vl);
  const long Nl = static_cast<long>(N);
  // Every rank's lse over its own real columns (-inf where it has none), and the target logit
  // from the rank that holds the target column (0 elsewhere, so the sum is that logit).
  softmax_crossentropy_forward<S>(c, a.losses, a.loss_lse, a.logits, a.targets, Nl, real, Vl);
  gather_target_logits<S>(c, a.vp_stats + tpn * N, a.logits, a.targets, Nl, Vl);
  opt.tp->set_device_stream(c.stream());
  opt.tp->all_gather(a.loss_lse, a.vp_stats, N);
  opt.tp->all_reduce(a.vp_stats + tpn * N, N);
  vp_host.resize((tpn + 1) * N + 2 * N);
  float* stats = vp_host.data();
  float* lse = stats + (tpn + 1) * N;
  float* losses = lse + N;
  check_cuda(
      cudaMemcpyAsync(stats, a.vp_stats, (tpn + 1) * N * sizeof(float), cudaMemcpyDeviceToHost, c.stream()),
      "cudaMemcpyAsync (cross-entropy statistics to host)");
  c.synchronize();
  const float* target_logit = stats + tpn * N;
  for (size_t r = 0; r < N; ++r) {
    float mx = -std::numeric_limits<float>::infinity();
    for (size_t q = 0; q < tpn; ++q) mx = std::max(mx, stats[q * N + r]);
    float sum = 0.0f;
    for (size_t q = 0; q < tpn; ++q) sum += std::exp(stats[q * N + r] - mx);
    lse[r] = mx + std::log(sum);
    losses[r] = lse[r] - target_logit[r];
  }
  check_cuda(cudaMemcpyAsync(a.loss_lse, lse, N * sizeof(float), cudaMemcpyHostToDevice, c.stream()),
             "cudaMemcpyAsync (global log-sum-exp to device)");
  check_cuda(cudaMemcpyAsync(a.losses, losses, N * sizeof(float), cudaMemcpyHostToDevice, c.stream()),
             "cudaMemcpyAsync (losses to device)");
  c.synchronize();  // the host buffer is reused by the next call
}

template <typename S>
float CudaGpt::Impl::forward(int slot, const int32_t* inputs, const float* stage_in, const int32_t* targets) {
  auto& all = slots<S>();
  if (slot < 0 || static_cast<size_t>(slot) >= all.size())
    throw Error(ExitCode::kInternal,
                "CudaGpt: activation slot " + std::to_string(slot) + " of " + std::to_string(all.size()));
  detail::Pass<S> pass(*this, all[static_cast<size_t>(slot)]);
  pass.upload_ids(inputs, targets);
  return pass.forward(stage_in);
}

template <typename S>
void CudaGpt::Impl::backward(int slot, const float* dout, float loss_scale) {
  auto& all = slots<S>();
  if (slot < 0 || static_cast<size_t>(slot) >= all.size())
    throw Error(ExitCode::kInternal,
                "CudaGpt: activation slot " + std::to_string(slot) + " of " + std::to_string(all.size()));
  detail::Pass<S> pass(*this, all[static_cast<size_t>(slot)]);
  pass.backward(dout, loss_scale);
  last_backward_slot = slot;
}

template float CudaGpt::Impl::forward<float>(int, const int32_t*, const float*, const int32_t*);
template float CudaGpt::Impl::forward<bf16>(int, const int32_t*, const float*, const int32_t*);
template void CudaGpt::Impl::backward<float>(int, const float*, float);
template void CudaGpt::Impl::backward<bf16>(int, const float*, float);

}  // namespace flotilla::cuda
