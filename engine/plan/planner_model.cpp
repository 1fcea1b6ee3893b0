// Planner formulas that depend only on the model and the layout degrees: parameter counts, FLOPs
// per token, the pipeline bubble, collective volumes, ZeRO divisors and the activation account.
//
// Decision: both FLOP conventions are computed with the N their sources use (PaLM/nanoGPT: no
// position table, real vocab; llm.c: every allocated parameter), because mixing an N from one with
// the attention term of the other gives a number neither tool would report.
#include <algorithm>

#include "engine/model/model.h"
#include "engine/plan/planner.h"

namespace flotilla {

ParamCounts count_parameters(const ModelDims& d) {
  ParamCounts p;
  p.allocated = num_parameters(d);
  p.total = num_parameters_unpadded(d);
  const auto C = static_cast<uint64_t>(d.n_embd);
  // GPT-2: the token and position tables; llama: the token embedding (an untied LM head is a
  // linear layer, counted with the rest, as transformers' num_parameters(exclude_embeddings)).
  p.embedding =
      static_cast<uint64_t>(d.vocab_size) * C + (d.llama() ? 0 : static_cast<uint64_t>(d.max_seq_len) * C);
  p.non_embedding = p.total - p.embedding;
  p.trainable = p.total;
  return p;
}

ParamCounts count_parameters(const ModelDims& d, const LoraSpec& lora) {
  ParamCounts p = count_parameters(d);
  if (lora.enabled()) p.trainable = lora_parameter_count(d, lora);
  return p;
}

FlopsPerToken flops_per_token(const ModelDims& d, int seq_len) {
  FlopsPerToken f;
  // Attention scores and their weighted sum run over the query width H x head_dim (C for GPT-2).
  const double L = d.n_layer, Q = d.q_dim(), T = seq_len;
  const uint64_t C = static_cast<uint64_t>(d.n_embd), V = static_cast<uint64_t>(d.vocab_size);
  // N = the parameters that do matmul work: GPT-2 all but the position table (the tied wte is the
  // LM head); llama all but an untied token embedding (a lookup; its LM head counts).
  f.n_palm = num_parameters_unpadded(d) -
             (d.llama() ? (d.tied() ? 0 : V * C) : static_cast<uint64_t>(d.max_seq_len) * C);
  f.n_llmc = num_parameters(d);
  f.palm = 6.0 * static_cast<double>(f.n_palm) + 12.0 * L * Q * T;
  f.llmc = 6.0 * static_cast<double>(f.n_llmc) + 6.0 * L * Q * T;
  return f;
}

FlopsPerToken flops_per_token(const ModelDims& d, int seq_len, const LoraSpec& lora) {
  FlopsPerToken f = flops_per_token(d, seq_len);
  if (!lora.enabled()) return f;
  const double n_lora = static_cast<double>(lora_parameter_count(d, lora));
  f.palm -= 2.0 * static_cast<double>(f.n_palm) - 6.0 * n_lora;
  f.llmc -= 2.0 * static_cast<double>(f.n_llmc) - 6.0 * n_lora;
  return f;
}

double recompute_flops_per_token(const ModelDims& d, int seq_len, const LoraSpec& lora) {
  double f = recompute_flops_per_token(d, seq_len);
  if (!lora.enabled()) return f;
  ModelDims one = d;
  one.n_layer = 1;
  double adapters = static_cast<double>(lora_parameter_count(one, lora));
  if (lora.has(kLoraDown))
    adapters -= static_cast<double>(lora.rank) * lora_target_shape(d, kLoraDown).second;
  return f + 2.0 * adapters;
}

double pipeline_bubble(int stages, int micro_batches) {
  if (stages <= 1) return 0.0;
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

double allreduce_bytes(double bytes, int ranks) {
  if (ranks <= 1) return 0.0;
  return 2.0 * (ranks - 1) / ranks * bytes;
}

double reduce_scatter_bytes(double bytes, int ranks) {
  if (ranks <= 1) return 0.0;
  return static_cast<double>(ranks - 1) / ranks * bytes;
}

ZeroDivisors zero_divisors(int stage, int dp) {
  ZeroDivisors z;
  const int n = std::max(dp, 1);
  if (stage >= 1) z.master = z.optimizer = n;
  if (stage >= 2) z.gradients = n;
  return z;
}

// The model's activation arena (activation_floats in gpt.h) split by what the layout needs.
// Exact parts are measured by differencing the model's own count: one block = f(L=2) - f(L=1),
// the logits = (f(Vp+128) - f(Vp)) / 128 x Vp. The finer split follows the arena's tensor list
// (N = B*T): per block, qkv (N,3C), atty (N,C), fch (N,4C) and the attention log-sum-exp (B,NH,T)
// are split across tensor-parallel ranks, LayerNorm outputs and residuals are not; of the rest,
// encoded (N,C) belongs to the first pipeline stage, lnf (N,C) and the (N) loss vectors to the
// last, and the remainder is backward scratch shared by every block.
// Under recomputation a block keeps f_rc(L=2) - f_rc(L=1): its output, the next block's input.
ActivationFloats activation_account(const ModelDims& d, int B, int T, int logits_rows) {
  // The chunk's rows stay fixed while Vp varies, so f(Vp + 128) - f(Vp) is 128 columns of exactly
  // the rows the arena holds (one chunk, or all B*T).
  ModelOptions o;
  o.logits_chunk_rows = logits_rows;
  const auto f = [&](int n_layer, int padded_vocab, bool recompute = false) {
    ModelDims x = d;
    x.n_layer = n_layer;
    x.padded_vocab = padded_vocab;
    return static_cast<double>(activation_bytes_for(x, ModelShard{}, B, T, recompute, o, 64, 1) /
                               sizeof(float));
  };
  const double n = static_cast<double>(B) * T, nc = n * d.n_embd, lse = static_cast<double>(B) * d.n_head * T;
  ActivationFloats a;
  a.per_layer = f(2, d.padded_vocab) - f(1, d.padded_vocab);
  // Split over TP: GPT-2 qkv (3C), atty (C), fch (4C); llama the q/k/v projection (and its pre-norm
  // copy and norm statistics under qk_norm), atty, gate/up (2F).
  const double D = d.qkv_dim(), Qd = d.q_dim(), F = d.ffn(), qk = d.qk_norm ? 1 : 0;
  const double shard =
      d.llama() ? n * (D + qk * (D + d.n_head + d.kv_heads()) + Qd + 2 * F) + lse : 8 * nc + lse;
  a.per_layer_shard = std::min(a.per_layer, shard);
  a.layer_input = f(2, d.padded_vocab, true) - f(1, d.padded_vocab, true);
  a.logits = (f(1, d.padded_vocab + 128) - f(1, d.padded_vocab)) / 128.0 * d.padded_vocab;
  const double rest = f(d.n_layer, d.padded_vocab) - d.n_layer * a.per_layer - a.logits;
  a.embedding = std::min(nc, rest);
  a.head = std::min(nc + 6 * n, rest - a.embedding);
  a.scratch = rest - a.embedding - a.head;
  // GPT-2: the GELU output and d fch / d qkv; llama: the SwiGLU output, its gradient and d gate_up / d qkv.
  a.scratch_shard = std::min(a.scratch, d.llama() ? n * (2 * F + std::max(2 * F, D)) : 8 * nc);
  return a;
}

// LoRA's share of the arena: the model's own count with the adapters minus without, at the run's tp
// (the adapters' widths and the TP partial-sum buffers depend on it), for one and two layers.
LoraActivationFloats lora_activation_account(const ModelDims& d, int tp, int B, int T, const LoraSpec& lora) {
  LoraActivationFloats a;
  if (!lora.enabled()) return a;
  const auto delta = [&](int n_layer) {
    ModelDims x = d;
    x.n_layer = n_layer;
    const ModelShard shard = make_shard(x, tp, 0, 1, 0);
    ModelOptions with;
    with.lora = lora;
    const size_t on = activation_bytes_for(x, shard, B, T, false, with);
    const size_t off = activation_bytes_for(x, shard, B, T, false, ModelOptions{});
    return (static_cast<double>(on) - static_cast<double>(off)) / sizeof(float);
  };
  const double one = delta(1);
  a.per_layer = delta(2) - one;
  a.scratch = one - a.per_layer;
  return a;
}

}  // namespace flotilla
