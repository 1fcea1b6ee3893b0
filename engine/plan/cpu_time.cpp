// The CPU step's work in matmul-FLOP equivalents: what the planner divides by (peak x efficiency)
// on a CPU (planner.h cpu_step_work, docs/planner.md "Step time on a CPU").
//
// Decision: the planner used to price a CPU step as model FLOPs (PaLM's 6N + 12*L*Q*T) over
// (peak x one efficiency). That efficiency is not a property of the machine: PaLM counts attention
// over the full T x T and both halves of a causal mask, the CPU kernel (engine/cpu/attention.cpp)
// runs the visible half in 64-row blocks at a lower rate than the sgemm and recomputes the scores in
// backward, and the memory-bound kernels (norms, RoPE, SwiGLU, residuals, the loss, AdamW) grow
// with the width, not its square. One efficiency fitted at T = 256 (0.81 of the FMA ceiling for
// SmolLM2-135M) was 0.6 at T = 4096, and the default 0.45 (tiny models under load) predicted
// +80% for every real model. So each part is priced at the rate its kernels run relative to the
// linear layers' sgemm, measured on the 2-core reference machine (bench --profile, the table in
// docs/planner.md), and the efficiency left is the sgemm's own fraction of the FMA ceiling, the same
// for every model and length: the default kDefaultCpuEfficiency, or what earlier runs teach.
#include <algorithm>

#include "engine/plan/planner.h"

namespace flotilla {

double CpuWork::total() const { return matmul + attention + elementwise + optimizer; }

double cpu_attention_flops_per_token(const ModelDims& d, int seq_len) {
  // Query blocks of kCpuAttentionBlock rows: block i computes (i + 1) x 64 key columns (the diagonal
  // block whole), so a row sees (T + 64) / 2 keys on average. Forward: scores and P V (2 products);
  // backward: the scores again, dV, dP, dQ, dK (5): 7 products of 2 x head_dim FLOPs per visible
  // (query, key) pair and head = 14 x Q per pair.
  const double visible = (static_cast<double>(seq_len) + kCpuAttentionBlock) / 2.0;
  return 14.0 * d.q_dim() * visible;
}

double cpu_elementwise_values_per_token(const ModelDims& d) {
  const double C = d.n_embd, F = d.ffn();
  // Values each block's memory-bound kernels read or write per token, forward: llama two RMSNorms
  // (2C), RoPE on q and k (q_dim + kv_dim), SwiGLU (gate, up in, one out: 3F), two residual adds
  // (2C); GPT-2 two LayerNorms (2C), GELU (2 x 4C in and out), two residual adds (2C) and the
  // attention and MLP biases (3C + C + 4C + C).
  if (d.llama()) return 4.0 * C + d.q_dim() + d.kv_dim() + 3.0 * F;
  return 4.0 * C + 8.0 * C + 9.0 * C;
}

CpuWork cpu_step_work(const ModelDims& d, int seq_len, double tokens, int n_layers, int rebuilt, bool head,
                      double matmul_flops, double trained_params) {
  CpuWork w;
  w.matmul = matmul_flops * tokens;
  const double attn = cpu_attention_flops_per_token(d, seq_len);
  // A rebuilt block runs the attention forward again: 2 of the 7 products.
  w.attention = kCpuAttentionCost * tokens * (n_layers * attn + rebuilt * attn * 2.0 / 7.0);
  const double values = cpu_elementwise_values_per_token(d);
  // Forward and backward (about three passes over the forward's values), a rebuilt block's forward
  // once more; the last stage's final norm and the fused softmax cross-entropy over the vocabulary.
  double elementwise = kCpuElementwiseCost * values * (n_layers + rebuilt / 3.0);
  if (head) elementwise += kCpuVocabCost * d.padded_vocab + kCpuElementwiseCost * d.n_embd;
  w.elementwise = elementwise * tokens;
  w.optimizer = kCpuOptimizerCost * trained_params;
  return w;
}

}  // namespace flotilla
