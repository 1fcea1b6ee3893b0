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
// The fused LM head (model.h) runs here too, for both architectures: the logits are computed and
// consumed chunk by chunk of rows, each chunk's local statistics written into the same N-float
// vectors, so the collectives above run once after the last chunk, exactly as unchunked.
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
void Model::Impl::crossentropy_rows(const SlotHead& h, const S* logits, float* losses, float* lse, size_t N,
                                    size_t r0, size_t n) {
  const long nl = static_cast<long>(n);
  if (s.tp == 1) {
    be->softmax_crossentropy_forward(losses + r0, lse + r0, logits, h.targets + r0, nl, d.vocab_size,
                                     d.padded_vocab);
    return;
  }
  // Every rank's lse over its own real columns (-inf where it has none: crossentropy_finish), and
  // the target logit from the rank that holds the target column (0 elsewhere, so the sum is that logit).
  const int real = v_real(), vl = Vl();
  if (real > 0) be->softmax_crossentropy_forward(losses + r0, lse + r0, logits, h.targets + r0, nl, real, vl);
  be->gather_target_logits(h.vp_stats + static_cast<size_t>(s.tp) * N + r0, logits, h.targets + r0, nl, vl);
}

double Model::Impl::crossentropy_finish(Slot& sl, const SlotHead& h, float* losses, float* lse,
                                        const int32_t* host_targets) {
  const size_t N = static_cast<size_t>(sl.B) * static_cast<size_t>(sl.T);
  if (s.tp == 1) return be->sum_values(losses, N);
  const size_t tpn = static_cast<size_t>(s.tp);
  host_stats.assign((tpn + 1) * N + 2 * N, 0.0f);
  float* stats = host_stats.data();
  float* g_lse = stats + (tpn + 1) * N;
  float* g_losses = g_lse + N;
  if (v_real() == 0) {
    std::fill(g_lse, g_lse + N, -std::numeric_limits<float>::infinity());
    be->upload(lse, g_lse, N * sizeof(float));
  }
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
void Model::Impl::crossentropy_backward_rows(const SlotHead& h, S* logits, const float* lse, float dloss,
                                             size_t r0, size_t n) {
  const long nl = static_cast<long>(n);
  if (s.tp == 1) {
    be->softmax_crossentropy_backward(logits, logits, lse + r0, h.targets + r0, dloss, nl, d.vocab_size,
                                      d.padded_vocab);
    return;
  }
  const int real = v_real(), vl = Vl();
  if (real == 0) {
    be->fill_zero_bytes(logits, n * static_cast<size_t>(vl) * sizeof(S));
    return;
  }
  be->softmax_crossentropy_backward(logits, logits, lse + r0, h.targets + r0, dloss, nl, real, vl);
}

template <typename S>
float Model::Impl::head_forward(Slot& sl, const SlotHead& h, const HeadBuffers<S>& hb,
                                const int32_t* host_targets) {
  const int C = d.n_embd, vl = Vl();
  const size_t C_ = static_cast<size_t>(C);
  const int rows = head_rows<S>(sl, hb.lnf);
  const size_t N = static_cast<size_t>(sl.B) * static_cast<size_t>(sl.T);
  const size_t chunk = logits_buffer_rows(N, opt.logits_chunk_rows);
  if (!sl.have_targets) {
    // Every row's logits at once: the arena's buffer holds them unless chunking made it smaller.
    S* out = hb.logits;
    if (static_cast<size_t>(rows) > chunk) {
      const size_t bytes = static_cast<size_t>(rows) * static_cast<size_t>(vl) * sizeof(S);
      if (wide_logits.size() * 4 < bytes) {
        wide_logits.reset();
        wide_logits = BackendBuffer(*be, (bytes + 3) / 4);
      }
      out = wide_logits.as<S>();
      sl.wide_logits = true;
    }
    be->matmul_forward(out, hb.lnf, hb.weight, static_cast<const S*>(nullptr), rows, C, vl,
                       static_cast<S*>(nullptr));
    sl.logits_valid = true;
    be->synchronize();
    return -1.0f;
  }
  // With targets (rows == N): logits then cross-entropy, chunk by chunk; the last chunk's logits stay.
  for (size_t r0 = 0; r0 < N; r0 += chunk) {
    const size_t n = std::min(chunk, N - r0);
    be->matmul_forward(hb.logits, hb.lnf + r0 * C_, hb.weight, static_cast<const S*>(nullptr),
                       static_cast<int>(n), C, vl, static_cast<S*>(nullptr));
    crossentropy_rows<S>(h, hb.logits, hb.losses, hb.lse, N, r0, n);
  }
  sl.chunked = chunk < N;
  sl.logits_valid = true;
  const double sum = crossentropy_finish(sl, h, hb.losses, hb.lse, host_targets);
  return sl.counted > 0 ? static_cast<float>(sum / static_cast<double>(sl.counted)) : 0.0f;
}

template <typename S>
void Model::Impl::head_backward(Slot& sl, const SlotHead& h, const HeadBuffers<S>& hb, float loss_scale) {
  const int C = d.n_embd, vl = Vl();
  const size_t C_ = static_cast<size_t>(C);
  const size_t N = static_cast<size_t>(sl.B) * static_cast<size_t>(sl.T);
  const size_t chunk = logits_buffer_rows(N, opt.logits_chunk_rows);
  // d(loss) per counted target: loss_scale / counted (rows without a loss get 0 from the kernel).
  const float dloss = sl.counted > 0 ? loss_scale / static_cast<float>(sl.counted) : 0.0f;
  // Last chunk first: its logits are still in the buffer; every other chunk's are recomputed with the
  // forward's own kernel and shape, so they are the forward's bits.
  const size_t last = (N - 1) / chunk * chunk;
  for (size_t r0 = last + chunk; r0 > 0;) {
    r0 -= chunk;
    const size_t n = std::min(chunk, N - r0);
    const int n_ = static_cast<int>(n);
    if (r0 != last)
      be->matmul_forward(hb.logits, hb.lnf + r0 * C_, hb.weight, static_cast<const S*>(nullptr), n_, C, vl,
                         static_cast<S*>(nullptr));
    crossentropy_backward_rows<S>(h, hb.logits, hb.lse, dloss, r0, n);
    sl.logits_valid = false;
    be->matmul_backward(hb.dln + r0 * C_, hb.dweight, static_cast<S*>(nullptr), hb.logits, hb.lnf + r0 * C_,
                        hb.weight, n_, C, vl);
  }
}

#define FLOTILLA_INSTANTIATE(S)                                                                              \
  template void Model::Impl::tp_reduce<S>(S*, size_t, float*);                                               \
  template void Model::Impl::embed_forward<S>(const SlotHead&, S*, const S*, const S*, const int32_t*, int,  \
                                              int, float*);                                                  \
  template void Model::Impl::embed_backward<S>(const SlotHead&, S*, S*, const S*, const int32_t*, int, int); \
  template float Model::Impl::head_forward<S>(Slot&, const SlotHead&, const HeadBuffers<S>&,                 \
                                              const int32_t*);                                               \
  template void Model::Impl::head_backward<S>(Slot&, const SlotHead&, const HeadBuffers<S>&, float);
FLOTILLA_INSTANTIATE(float)
FLOTILLA_INSTANTIATE(bf16_t)
#undef FLOTILLA_INSTANTIATE

}  // namespace flotilla
