// GptModel forward and backward as an explicit sequence of backend kernels (llm.c style), for the
// whole model or one tensor/pipeline-parallel shard.
//
// Megatron's conjugate operators, written out where they act: "f" is the identity forward and an
// all-reduce of d(input) backward, in front of each column-parallel matmul (QKV, MLP-up, and the
// vocab-parallel LM head); "g" is an all-reduce forward and the identity backward, behind each
// row-parallel matmul (attention-out, MLP-down), whose bias only TP rank 0 adds so it counts once.
// Non-obvious decision: the row-parallel biases' gradients are still computed on every TP rank
// (from the replicated d(output)), so every replicated tensor stays bitwise equal across TP ranks
// without communication of its own.
#include <cmath>
#include <cstring>

#include "engine/model/gpt_impl.h"

namespace flotilla {

void GptModel::Impl::block_forward(const GptActivations& a, int l, const float* residual, int B, int T,
                                   bool full) {
  Backend& b = *be;
  const size_t N = static_cast<size_t>(B) * static_cast<size_t>(T);
  const int n = static_cast<int>(N);
  const int C_i = C(), Ca_i = Ca(), F_i = F();
  const size_t ul = static_cast<size_t>(l), C_ = static_cast<size_t>(C_i), Ca_ = static_cast<size_t>(Ca_i),
               F_ = static_cast<size_t>(F_i), NC = N * C_;
  const bool bias_here = s.tp_rank == 0;  // row-parallel biases are added once
  b.layernorm_forward(a.ln1(l), a.ln1_mean(l), a.ln1_rstd(l), residual, p(kLn1w) + ul * C_, p(kLn1b) + ul * C_,
                      static_cast<long>(N), C_i);
  b.matmul_forward(a.qkv(l), a.ln1(l), p(kQkvw) + ul * 3 * Ca_ * C_, p(kQkvb) + ul * 3 * Ca_, n, C_i, 3 * Ca_i);
  b.attention_forward(a.atty(l), a.att_lse(l), a.qkv(l), B, T, Ca_i, NHl());
  b.matmul_forward(a.proj, a.atty(l), p(kAttprojw) + ul * C_ * Ca_, bias_here ? p(kAttprojb) + ul * C_ : nullptr,
                   n, Ca_i, C_i);
  tp_all_reduce(a.proj, NC);  // g
  b.residual_forward(a.residual2(l), residual, a.proj, NC);
  b.layernorm_forward(a.ln2(l), a.ln2_mean(l), a.ln2_rstd(l), a.residual2(l), p(kLn2w) + ul * C_,
                      p(kLn2b) + ul * C_, static_cast<long>(N), C_i);
  b.matmul_forward(a.fch(l), a.ln2(l), p(kFcw) + ul * F_ * C_, p(kFcb) + ul * F_, n, C_i, F_i);
  b.gelu_forward(a.gelu, a.fch(l), N * F_);
  if (!full) return;
  b.matmul_forward(a.proj, a.gelu, p(kFcprojw) + ul * C_ * F_, bias_here ? p(kFcprojb) + ul * C_ : nullptr, n,
                   F_i, C_i);
  tp_all_reduce(a.proj, NC);  // g
  b.residual_forward(a.residual3(l), a.residual2(l), a.proj, NC);
}

float GptModel::forward_stage(int slot, const int32_t* inputs, const float* stage_in, const int32_t* targets,
                              int B, int T) {
  Impl& m = *impl_;
  const GptDims& d = m.d;
  const GptShard& s = m.s;
  if (B < 1 || T < 1)
    throw_config("batch " + std::to_string(B) + " x sequence " + std::to_string(T) + " is empty");
  if (T > d.max_seq_len)
    throw_config("sequence length " + std::to_string(T) + " exceeds model.max_seq_len " +
                 std::to_string(d.max_seq_len) + "; lower train.seq_len or raise model.max_seq_len");
  if (s.tp > 1 && (m.tp == nullptr || m.tp->size() != s.tp))
    throw Error(ExitCode::kInternal, "GptModel (" + s.describe() + "): no tensor-parallel group of size " +
                                         std::to_string(s.tp) + " was set");
  const size_t N = static_cast<size_t>(B) * static_cast<size_t>(T);
  const size_t C_ = static_cast<size_t>(d.n_embd);
  const size_t NC = N * C_;
  if (s.first_stage()) {
    if (inputs == nullptr) throw Error(ExitCode::kInternal, "GptModel: the first stage needs input tokens");
    m.check_tokens(inputs, N, "input");
  } else if (stage_in == nullptr) {
    throw Error(ExitCode::kInternal,
                "GptModel: stage " + std::to_string(s.stage) + " needs an input activation");
  }
  const bool with_targets = s.last_stage() && targets != nullptr;
  if (with_targets) m.check_tokens(targets, N, "target");

  Impl::Slot& sl = m.slot(slot);
  const ActivationSizes need = activation_sizes(d, s, B, T, m.recompute);
  if (sl.arena.size() < need.arena) {
    sl.arena.reset();
    sl.arena = BackendBuffer(*m.be, need.arena);
  }
  if (m.block.size() < need.block) {  // other slots re-point at the new region in their backward
    m.block.reset();
    m.block = BackendBuffer(*m.be, need.block);
  }
  m.block_slot = m.block_layer = -1;
  sl.acts = layout_activations(d, s, B, T, sl.arena.data(), m.recompute, m.block.data());
  sl.B = B;
  sl.T = T;
  sl.forwarded = true;
  sl.have_targets = with_targets;
  sl.logits_valid = false;
  m.last_forward = &sl.acts;
  const GptActivations& a = sl.acts;
  if (s.first_stage()) std::memcpy(a.input_ids, inputs, N * sizeof(int32_t));
  if (with_targets) std::memcpy(a.target_ids, targets, N * sizeof(int32_t));

  Backend& be = *m.be;
  const int C = m.C(), L = s.local_layers();
  const int n = static_cast<int>(N);

  if (!s.first_stage())
    std::memcpy(a.encoded, stage_in, NC * sizeof(float));
  else if (s.tp == 1)
    be.encoder_forward(a.encoded, a.input_ids, m.p(kWte), m.p(kWpe), B, T, C);
  else
    m.vp_embed_forward(a, B, T);
  for (int l = 0; l < L; ++l) m.block_forward(a, l, l == 0 ? a.encoded : a.residual3(l - 1), B, T, true);
  sl.gelu_layer = L - 1;
  if (m.recompute) {  // the block region holds this forward's last block
    m.block_slot = slot;
    m.block_layer = L - 1;
  }
  if (!s.last_stage()) {
    be.synchronize();
    return -1.0f;
  }
  be.layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, a.residual3(L - 1), m.p(kLnfw), m.p(kLnfb),
                       static_cast<long>(N), C);
  be.matmul_forward(a.logits, a.lnf, m.p(kWte), nullptr, n, C, m.Vl());
  sl.logits_valid = true;
  if (!with_targets) {
    be.synchronize();
    return -1.0f;
  }
  if (s.tp == 1)
    be.softmax_crossentropy_forward(a.losses, a.loss_lse, a.logits, a.target_ids, static_cast<long>(N),
                                    d.vocab_size, d.padded_vocab);
  else
    m.vp_crossentropy_forward(a, N);
  be.synchronize();
  double sum = 0.0;
  for (size_t i = 0; i < N; ++i) sum += a.losses[i];
  return static_cast<float>(sum / static_cast<double>(N));
}

const float* GptModel::stage_output(int slot) const {
  Impl& m = *impl_;
  const Impl::Slot& sl = m.slot(slot);
  if (!sl.forwarded) throw Error(ExitCode::kInternal, "GptModel::stage_output: slot has no forward");
  return sl.acts.residual3(m.s.local_layers() - 1);
}

const float* GptModel::stage_input_grad() const {
  const Impl& m = *impl_;
  if (m.last_backward_slot < 0)
    throw Error(ExitCode::kInternal, "GptModel::stage_input_grad before backward");
  return m.slots[static_cast<size_t>(m.last_backward_slot)].acts.dresidual;
}

void GptModel::backward_stage(int slot, const float* dout, float loss_scale) {
  Impl& m = *impl_;
  const GptShard& s = m.s;
  Impl::Slot& sl = m.slot(slot);
  if (!sl.forwarded || (s.last_stage() && (!sl.have_targets || !sl.logits_valid)))
    throw Error(ExitCode::kInternal,
                "GptModel::backward() needs a preceding forward() with targets, once per forward");
  if (!s.last_stage() && dout == nullptr)
    throw Error(ExitCode::kInternal, "GptModel: stage " + std::to_string(s.stage) + " needs d(output)");
  const GptDims& d = m.d;
  Backend& be = *m.be;
  // Under recomputation the block region may have moved since this slot's forward (another
  // slot's larger forward regrew it): point the slot's block tensors at it again.
  if (m.recompute)
    sl.acts = layout_activations(d, s, sl.B, sl.T, sl.arena.data(), true, m.block.data());
  const GptActivations& a = sl.acts;
  const int B = sl.B, T = sl.T, C = m.C(), Ca = m.Ca(), F = m.F(), NHl = m.NHl(), L = s.local_layers();
  const size_t N = static_cast<size_t>(B) * static_cast<size_t>(T);
  const int n = static_cast<int>(N);
  const size_t C_ = static_cast<size_t>(C), Ca_ = static_cast<size_t>(Ca), F_ = static_cast<size_t>(F);
  const size_t NC = N * C_;

  if (m.staged && !m.layer_hook)
    throw Error(ExitCode::kInternal,
                "GptModel::backward: layer-gradient staging (ZeRO-2) needs a layer backward hook to drain "
                "each layer's staging slot");
  if (s.last_stage()) {
    // Loss -> logits (in place) -> final LayerNorm.
    const float dloss = loss_scale / static_cast<float>(N);
    if (s.tp == 1)
      be.softmax_crossentropy_backward(a.logits, a.logits, a.loss_lse, a.target_ids, dloss,
                                       static_cast<long>(N), d.vocab_size, d.padded_vocab);
    else
      m.vp_crossentropy_backward(a, N, dloss);
    sl.logits_valid = false;
    be.matmul_backward(a.dln, m.g(kWte), nullptr, a.logits, a.lnf, m.p(kWte), n, C, m.Vl());
    m.tp_all_reduce(a.dln, NC);  // f of the vocab-parallel head
    be.fill_zero(a.dresidual, NC);
    be.layernorm_backward(a.dresidual, m.g(kLnfw), m.g(kLnfb), a.dln, a.residual3(L - 1), m.p(kLnfw),
                          a.lnf_mean, a.lnf_rstd, static_cast<long>(N), C);
  } else {
    std::memcpy(a.dresidual, dout, NC * sizeof(float));
  }

  // dresidual holds d(residual3[l]) on entry to layer l and d(residual3[l-1]) on exit.
  for (int l = L - 1; l >= 0; --l) {
    const size_t ul = static_cast<size_t>(l);
    const float* residual = l == 0 ? a.encoded : a.residual3(l - 1);
    if (m.recompute && (m.block_slot != slot || m.block_layer != l)) {
      // Rebuild block l from its input with the forward's own kernels: the same bits.
      m.block_forward(a, l, residual, B, T, false);
      m.block_slot = slot;
      m.block_layer = l;
      sl.gelu_layer = l;
    }
    // MLP block: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2)))).
    if (sl.gelu_layer != l) be.gelu_forward(a.gelu, a.fch(l), N * F_);
    sl.gelu_layer = -1;
    be.matmul_backward(a.dbig, m.lg(kFcprojw, ul), m.lg(kFcprojb, ul), a.dresidual, a.gelu,
                       m.p(kFcprojw) + ul * C_ * F_, n, F, C);
    be.gelu_backward(a.dbig, a.fch(l), a.dbig, N * F_);
    be.matmul_backward(a.dln, m.lg(kFcw, ul), m.lg(kFcb, ul), a.dbig, a.ln2(l), m.p(kFcw) + ul * F_ * C_, n,
                       C, F);
    m.tp_all_reduce(a.dln, NC);  // f
    be.layernorm_backward(a.dresidual, m.lg(kLn2w, ul), m.lg(kLn2b, ul), a.dln, a.residual2(l),
                          m.p(kLn2w) + ul * C_, a.ln2_mean(l), a.ln2_rstd(l), static_cast<long>(N), C);
    // Attention block: residual2 = residual + attproj(attention(qkv(ln1(residual)))).
    be.matmul_backward(a.proj, m.lg(kAttprojw, ul), m.lg(kAttprojb, ul), a.dresidual, a.atty(l),
                       m.p(kAttprojw) + ul * C_ * Ca_, n, Ca, C);
    be.attention_backward(a.dbig, a.proj, a.qkv(l), a.atty(l), a.att_lse(l), B, T, Ca, NHl);
    be.matmul_backward(a.dln, m.lg(kQkvw, ul), m.lg(kQkvb, ul), a.dbig, a.ln1(l),
                       m.p(kQkvw) + ul * 3 * Ca_ * C_, n, C, 3 * Ca);
    m.tp_all_reduce(a.dln, NC);  // f
    be.layernorm_backward(a.dresidual, m.lg(kLn1w, ul), m.lg(kLn1b, ul), a.dln, residual,
                          m.p(kLn1w) + ul * C_, a.ln1_mean(l), a.ln1_rstd(l), static_cast<long>(N), C);
    if (m.layer_hook) {
      be.synchronize();
      m.layer_hook(l);
    }
  }
  if (s.first_stage()) {
    if (s.tp == 1)
      be.encoder_backward(m.g(kWte), m.g(kWpe), a.dresidual, a.input_ids, B, T, C);
    else
      m.vp_embed_backward(a, B, T);
  }
  be.synchronize();
  sl.forwarded = false;
  if (m.block_slot == slot) m.block_slot = m.block_layer = -1;  // its forward is consumed
  m.last_backward_slot = slot;
}

}  // namespace flotilla
