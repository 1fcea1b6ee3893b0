// The pieces of a step both architectures share: the tensor-parallel all-reduce of an activation,
// the token embedding (vocab-parallel under TP) and the loss head (vocab-parallel cross-entropy).
//
// Embedding: each rank writes its rows for the tokens it owns and zeros elsewhere, TP rank 0 adds
// the position embedding (GPT-2); the all-reduce sums exactly one non-zero term per element per
// rank pair (x + 0 is exact), so the result equals the whole model's lookup bit for bit.
// Cross-entropy, non-obvious decision: no logits are gathered. Each rank runs the ordinary fused
// kernel over its own real-vocabulary columns to get a per-row log-sum-exp, the ranks all-gather
// those N values and combine them (lse = M + log sum exp(lse_r - M)), and the target logit comes
// from its owner through an all-reduce of N values (zeros elsewhere). Backward reuses the kernel
// with the global lse, with no one-hot on rows whose target another rank owns. Communication per
// micro-batch: 2N floats forward, none backward beyond the head's d(input) all-reduce.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/model/model_impl.h"

namespace flotilla {

template <typename S>
void Model::Impl::tp_reduce(S* x, size_t n, float* f32) {
  if (s.tp <= 1) return;
  tp->set_device_stream(be->stream());  // the collective orders after the kernels that wrote x
  if constexpr (sizeof(S) == sizeof(float)) {
    (void)f32;
    tp->all_reduce(reinterpret_cast<float*>(x), n);
  } else {
    be->convert(f32, x, n);
    tp->all_reduce(f32, n);
    be->convert(x, f32, n);
  }
}

template <typename S>
void Model::Impl::embed_forward(const SlotHead& h, S* out, const S* wte, const S* wpe, const int32_t* pos,
                                int B, int T, float* f32) {
  be->encoder_forward(out, h.inputs, wte, s.tp_rank == 0 ? wpe : nullptr, pos, B, T, d.n_embd);
  tp_reduce<S>(out, static_cast<size_t>(B) * static_cast<size_t>(T) * static_cast<size_t>(d.n_embd), f32);
}

template <typename S>
void Model::Impl::embed_backward(const SlotHead& h, S* dwte, S* dwpe, const S* dout, const int32_t* pos,
                                 int B, int T) {
  be->encoder_backward(dwte, dwpe, dout, h.inputs, pos, B, T, d.n_embd);
}

template <typename S>
double Model::Impl::crossentropy_forward(Slot& sl, const SlotHead& h, S* logits, float* losses, float* lse,
                                         const int32_t* host_targets) {
  const size_t N = static_cast<size_t>(sl.B) * static_cast<size_t>(sl.T);
  const long Nl = static_cast<long>(N);
  if (s.tp == 1) {
    be->softmax_crossentropy_forward(losses, lse, logits, h.targets, Nl, d.vocab_size, d.padded_vocab);
    return be->sum_values(losses, N);
  }
  const size_t tpn = static_cast<size_t>(s.tp);
  const int real = v_real(), vl = Vl();
  // Every rank's lse over its own real columns (-inf where it has none), and the target logit
  // from the rank that holds the target column (0 elsewhere, so the sum is that logit).
  host_stats.assign((tpn + 1) * N + 2 * N, 0.0f);
  float* stats = host_stats.data();
  float* g_lse = stats + (tpn + 1) * N;
  float* g_losses = g_lse + N;
  if (real > 0) {
    be->softmax_crossentropy_forward(losses, lse, logits, h.targets, Nl, real, vl);
  } else {
    std::fill(g_lse, g_lse + N, -std::numeric_limits<float>::infinity());
    be->upload(lse, g_lse, N * sizeof(float));
  }
  be->gather_target_logits(h.vp_stats + tpn * N, logits, h.targets, Nl, vl);
  tp->set_device_stream(be->stream());
  tp->all_gather(lse, h.vp_stats, N);
  tp->all_reduce(h.vp_stats + tpn * N, N);
  be->download(stats, h.vp_stats, (tpn + 1) * N * sizeof(float));
  const float* target_logit = stats + tpn * N;
  double sum = 0.0;
  for (size_t r = 0; r < N; ++r) {
    float mx = -std::numeric_limits<float>::infinity();
    for (size_t q = 0; q < tpn; ++q) mx = std::max(mx, stats[q * N + r]);
    float total = 0.0f;
    for (size_t q = 0; q < tpn; ++q) total += std::exp(stats[q * N + r] - mx);
    g_lse[r] = mx + std::log(total);  // the global log-sum-exp, for backward
    g_losses[r] = host_targets[r] == kIgnoreTarget ? 0.0f : g_lse[r] - target_logit[r];
    sum += g_losses[r];
  }
  be->upload(lse, g_lse, N * sizeof(float));
  be->upload(losses, g_losses, N * sizeof(float));
  return sum;
}

template <typename S>
void Model::Impl::crossentropy_backward(Slot& sl, const SlotHead& h, S* logits, const float* lse,
                                        float loss_scale) {
  const size_t N = static_cast<size_t>(sl.B) * static_cast<size_t>(sl.T);
  const long Nl = static_cast<long>(N);
  // d(loss) per counted target: loss_scale / counted (rows without a loss get 0 from the kernel).
  const float dloss = sl.counted > 0 ? loss_scale / static_cast<float>(sl.counted) : 0.0f;
  if (s.tp == 1) {
    be->softmax_crossentropy_backward(logits, logits, lse, h.targets, dloss, Nl, d.vocab_size,
                                      d.padded_vocab);
    return;
  }
  const int real = v_real(), vl = Vl();
  if (real == 0) {
    be->fill_zero_bytes(logits, N * static_cast<size_t>(vl) * sizeof(S));
    return;
  }
  be->softmax_crossentropy_backward(logits, logits, lse, h.targets, dloss, Nl, real, vl);
}

#define FLOTILLA_INSTANTIATE(S)                                                                              \
  template void Model::Impl::tp_reduce<S>(S*, size_t, float*);                                               \
  template void Model::Impl::embed_forward<S>(const SlotHead&, S*, const S*, const S*, const int32_t*, int,  \
                                              int, float*);                                                  \
  template void Model::Impl::embed_backward<S>(const SlotHead&, S*, S*, const S*, const int32_t*, int, int); \
  template double Model::Impl::crossentropy_forward<S>(Slot&, const SlotHead&, S*, float*, float*,           \
                                                       const int32_t*);                                      \
  template void Model::Impl::crossentropy_backward<S>(Slot&, const SlotHead&, S*, const float*, float);
FLOTILLA_INSTANTIATE(float)
FLOTILLA_INSTANTIATE(bf16_t)
#undef FLOTILLA_INSTANTIATE

}  // namespace flotilla
