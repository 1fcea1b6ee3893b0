// Vocab-parallel embedding and cross-entropy (Megatron): each TP rank holds Vp/tp rows of wte.
//
// Embedding: each rank writes its rows for the tokens it owns and zeros elsewhere; the all-reduce
// sums exactly one non-zero term per element (x + 0 is exact), so the result equals the whole
// model's lookup bit for bit; wpe (replicated) is added after it.
// Cross-entropy, non-obvious decision: no logits are gathered. Each rank runs the ordinary fused
// kernel over its own real-vocabulary columns to get a per-row log-sum-exp, the ranks all-gather
// those N values and combine them (lse = M + log sum exp(lse_r - M)), and the target logit comes
// from its owner through an all-reduce of N values (zeros elsewhere). Backward reuses the kernel
// with the global lse. Communication per micro-batch: 2N floats forward, none backward beyond the
// head's d(input) all-reduce.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/model/gpt_impl.h"

namespace flotilla {

void GptModel::Impl::vp_embed_forward(const GptActivations& a, int B, int T) {
  const size_t C_ = static_cast<size_t>(C());
  const size_t N = static_cast<size_t>(B) * static_cast<size_t>(T);
  const int lo = v0(), hi = v0() + Vl();
  const float* wte = p(kWte);
  for (size_t r = 0; r < N; ++r) {
    const int id = a.input_ids[r];
    float* out = a.encoded + r * C_;
    if (id >= lo && id < hi)
      std::memcpy(out, wte + static_cast<size_t>(id - lo) * C_, C_ * sizeof(float));
    else
      std::memset(out, 0, C_ * sizeof(float));
  }
  tp_all_reduce(a.encoded, N * C_);
  const float* wpe = p(kWpe);
  for (size_t r = 0; r < N; ++r) {
    float* out = a.encoded + r * C_;
    const float* pos = wpe + (r % static_cast<size_t>(T)) * C_;
    for (size_t c = 0; c < C_; ++c) out[c] = out[c] + pos[c];
  }
}

void GptModel::Impl::vp_embed_backward(const GptActivations& a, int B, int T) {
  const size_t C_ = static_cast<size_t>(C());
  const size_t N = static_cast<size_t>(B) * static_cast<size_t>(T);
  const int lo = v0(), hi = v0() + Vl();
  float* dwte = g(kWte);
  float* dwpe = g(kWpe);
  for (size_t r = 0; r < N; ++r) {
    const float* dout = a.dresidual + r * C_;
    float* dpos = dwpe + (r % static_cast<size_t>(T)) * C_;
    for (size_t c = 0; c < C_; ++c) dpos[c] += dout[c];
    const int id = a.input_ids[r];
    if (id < lo || id >= hi) continue;
    float* row = dwte + static_cast<size_t>(id - lo) * C_;
    for (size_t c = 0; c < C_; ++c) row[c] += dout[c];
  }
}

namespace {
// Targets as columns of this rank's slice (owned rows), or 0 where another rank owns the target
// (the kernel needs a valid column; the caller undoes its effect there).
void local_targets(const int32_t* targets, size_t N, int lo, int real, std::vector<int32_t>& out) {
  out.resize(N);
  for (size_t r = 0; r < N; ++r) {
    const int t = targets[r] - lo;
    out[r] = t >= 0 && t < real ? t : 0;
  }
}
bool owns(int32_t target, int lo, int real) { return target >= lo && target < lo + real; }
}  // namespace

void GptModel::Impl::vp_crossentropy_forward(const GptActivations& a, size_t N) {
  const int lo = v0(), real = v_real(), vl = Vl();
  const size_t tp_n = static_cast<size_t>(s.tp);
  local_targets(a.target_ids, N, lo, real, vp_targets);
  if (real > 0) {
    be->softmax_crossentropy_forward(a.losses, a.loss_lse, a.logits, vp_targets.data(), static_cast<long>(N),
                                     real, vl);
    be->synchronize();
  } else {
    for (size_t r = 0; r < N; ++r) a.loss_lse[r] = -std::numeric_limits<float>::infinity();
  }
  vp_scratch.resize(tp_n * N + N);
  float* gathered = vp_scratch.data();  // (tp, N): every rank's per-row lse
  float* target_logit = gathered + tp_n * N;
  tp->all_gather(a.loss_lse, gathered, N);
  for (size_t r = 0; r < N; ++r)
    target_logit[r] = owns(a.target_ids[r], lo, real)
                          ? a.logits[r * static_cast<size_t>(vl) + static_cast<size_t>(vp_targets[r])]
                          : 0.0f;
  tp->all_reduce(target_logit, N);
  for (size_t r = 0; r < N; ++r) {
    float mx = -std::numeric_limits<float>::infinity();
    for (size_t q = 0; q < tp_n; ++q) mx = std::max(mx, gathered[q * N + r]);
    float sum = 0.0f;
    for (size_t q = 0; q < tp_n; ++q) sum += std::exp(gathered[q * N + r] - mx);
    const float lse = mx + std::log(sum);
    a.loss_lse[r] = lse;  // the global log-sum-exp, for backward
    a.losses[r] = lse - target_logit[r];
  }
}

void GptModel::Impl::vp_crossentropy_backward(const GptActivations& a, size_t N, float dloss) {
  const int lo = v0(), real = v_real(), vl = Vl();
  if (real == 0) {
    be->fill_zero(a.logits, N * static_cast<size_t>(vl));
    return;
  }
  local_targets(a.target_ids, N, lo, real, vp_targets);
  be->softmax_crossentropy_backward(a.logits, a.logits, a.loss_lse, vp_targets.data(), dloss,
                                    static_cast<long>(N), real, vl);
  be->synchronize();
  // Rows whose target another rank owns: the kernel subtracted dloss at column 0; put it back.
  for (size_t r = 0; r < N; ++r)
    if (!owns(a.target_ids[r], lo, real)) a.logits[r * static_cast<size_t>(vl)] += dloss;
}

}  // namespace flotilla
