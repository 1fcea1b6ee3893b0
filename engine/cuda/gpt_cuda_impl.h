// CudaGpt's private state, shared by gpt_cuda.cpp (construction, parameters, optimizer) and
// gpt_cuda_pass.cpp (forward and backward, tensor and pipeline parallelism). Internal header.
//
// Non-obvious decision (as GptModel's gpt_impl.h): every pipeline slot (a micro-batch in flight)
// owns a whole activation set, scratch included, so one slot's backward can never clobber what
// another slot's forward left for its own backward. Without pipeline stages there is one slot and
// the memory is what it was before stages existed.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/core/error.h"
#include "engine/cuda/context.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/gpt_cuda.h"
#include "engine/parallel/process_group.h"

namespace flotilla::cuda::detail {

// One cudaMalloc, carved in 256-byte aligned pieces; counts bytes when base is null.
class Arena {
 public:
  explicit Arena(size_t bytes = 0) {
    if (bytes > 0) check_cuda(cudaMalloc(&base_, bytes), "cudaMalloc (CudaGpt arena)");
    cap_ = bytes;
  }
  ~Arena() {
    if (base_) cudaFree(base_);
  }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  template <typename T>
  T* take(size_t count) {
    const size_t at = used_;
    used_ += (count * sizeof(T) + 255) / 256 * 256;
    if (base_ == nullptr) return nullptr;
    if (used_ > cap_) throw Error(ExitCode::kInternal, "CudaGpt: arena layout overflow");
    return reinterpret_cast<T*>(static_cast<char*>(base_) + at);
  }
  size_t used() const { return used_; }
  void* base() const { return base_; }

 private:
  void* base_ = nullptr;
  size_t cap_ = 0, used_ = 0;
};

// One slot's activations (storage type T; statistics in fp32).
template <typename T>
struct Acts {
  T *ln1, *qkv, *atty, *residual2, *ln2, *fch, *fch_gelu, *residual3;
  float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *att_lse;
  T *encoded, *lnf, *logits, *proj, *dresidual, *dln, *dbig;
  float *lnf_mean, *lnf_rstd, *losses, *loss_lse;
  int32_t *inputs, *targets;
  // tp > 1 only: an fp32 copy of one (N, C) activation for the bf16 all-reduce, and the
  // cross-entropy's gathered statistics (tp x N log-sum-exps, then N target logits).
  float *tp_sum, *vp_stats;
  // Pipeline stages under bf16: the fp32 (N, C) stage output sent on, and d(stage input) sent back.
  float *out_f32, *dinput_f32;
};

template <typename T>
Acts<T> carve_acts(Arena& a, const GptDims& d, const GptShard& s, int B, int T_, bool recompute) {
  // With recompute, the per-block activations exist once (slot 0, rebuilt before each block's
  // backward); only the residual stream (residual3: every block's output) is kept per layer.
  // Under TP the attention and MLP widths and the vocabulary are this rank's share; a pipeline
  // stage holds its own layers, and the head only on the last stage.
  const size_t tp = static_cast<size_t>(s.tp);
  const size_t Lall = static_cast<size_t>(s.local_layers()), C = static_cast<size_t>(d.n_embd), Ca = C / tp;
  const size_t F = 4 * C / tp, L = recompute ? 1 : Lall;
  const size_t N = static_cast<size_t>(B) * static_cast<size_t>(T_), NH = static_cast<size_t>(d.n_head) / tp;
  const size_t Vl = static_cast<size_t>(d.padded_vocab) / tp;
  const bool last = s.last_stage(), bf16_storage = sizeof(T) != sizeof(float);
  Acts<T> x{};
  x.ln1 = a.take<T>(L * N * C);
  x.qkv = a.take<T>(L * N * 3 * Ca);
  x.atty = a.take<T>(L * N * Ca);
  x.residual2 = a.take<T>(L * N * C);
  x.ln2 = a.take<T>(L * N * C);
  x.fch = a.take<T>(L * N * F);
  x.fch_gelu = a.take<T>(L * N * F);
  x.residual3 = a.take<T>(Lall * N * C);
  x.ln1_mean = a.take<float>(L * N);
  x.ln1_rstd = a.take<float>(L * N);
  x.ln2_mean = a.take<float>(L * N);
  x.ln2_rstd = a.take<float>(L * N);
  x.att_lse = a.take<float>(L * NH * N);
  x.encoded = a.take<T>(N * C);
  x.proj = a.take<T>(N * C);
  x.dresidual = a.take<T>(N * C);
  x.dln = a.take<T>(N * C);
  x.dbig = a.take<T>(N * std::max(F, 3 * Ca));
  x.inputs = a.take<int32_t>(N);
  x.targets = a.take<int32_t>(N);
  if (last) {
    x.lnf = a.take<T>(N * C);
    x.logits = a.take<T>(N * Vl);
    x.lnf_mean = a.take<float>(N);
    x.lnf_rstd = a.take<float>(N);
    x.losses = a.take<float>(N);
    x.loss_lse = a.take<float>(N);
  }
  if (tp > 1) {
    x.tp_sum = bf16_storage ? a.take<float>(N * C) : nullptr;
    if (last) x.vp_stats = a.take<float>((tp + 1) * N);
  }
  if (bf16_storage && !last) x.out_f32 = a.take<float>(N * C);
  if (bf16_storage && !s.first_stage()) x.dinput_f32 = a.take<float>(N * C);
  return x;
}

// Device buffers a pipeline stage shares between its slots: what the runner receives into (the
// previous stage's output, the next stage's d(input)), and under bf16 an fp32 copy of the wte
// gradient for the tied all-reduce between the first and the last stage.
struct StageBuffers {
  float *recv_act = nullptr, *recv_grad = nullptr, *tied_f32 = nullptr;
};
StageBuffers carve_stage_buffers(Arena& a, const GptDims& d, const GptShard& s, int B, int T_, bool use_bf16,
                                 size_t wte_floats);

}  // namespace flotilla::cuda::detail

namespace flotilla::cuda {

struct CudaGpt::Impl {
  template <typename S>
  using Acts = detail::Acts<S>;

  CudaBackend* be = nullptr;
  Context* ctx = nullptr;
  GptDims d;
  GptShard sh;  // this rank's shard (the whole model without TP or PP)
  int B = 0, T = 0;
  CudaGptOptions opt;
  size_t n = 0;
  std::array<size_t, kNumParamTensors> offsets{}, sizes{};
  // Where the gradients live: goffsets (= offsets, or under ZeRO-2 a compact buffer of the
  // non-layer tensors), and under ZeRO-2 each layer tensor's slice at layer_goff inside a staging
  // slot of layer_floats values; slot k starts at g + staging_at + k * layer_floats.
  std::array<size_t, kNumParamTensors> goffsets{}, layer_goff{};
  size_t g_count = 0, layer_floats = 0, staging_at = 0;
  std::vector<float> vp_host;            // TP cross-entropy: the gathered statistics on the host
  std::vector<int32_t> ids_in, ids_out;  // TP: token ids local to this rank's vocabulary rows
  std::unique_ptr<detail::Arena> params, optim, acts;
  void* p = nullptr;  // S* parameters
  void* g = nullptr;  // S* gradients
  float *master = nullptr, *m = nullptr, *v = nullptr;
  // ZeRO-1: m and v cover [shard_begin, shard_begin + shard_count) only; the vector update()
  // writes in fp32 (master or p) has `padded` >= n values for the in-place all-gather.
  size_t shard_begin = 0, shard_count = 0, padded = 0;
  // ZeRO-2 (opt.zero2): two fp32 slots the layer sums run in under bf16 (fp32 sums run in the
  // staging slots), the fp32 gradient shard, and the all-reduce in flight on each slot.
  bool zero2 = false;
  float *comm = nullptr, *shard_grad = nullptr;
  struct InFlight {
    int layer = -1;
    std::unique_ptr<parallel::Work> work;
  } in_flight[2];
  std::vector<Acts<float>> af;  // one per slot (fp32 storage)
  std::vector<Acts<bf16>> ab;   // one per slot (bf16 storage)
  detail::StageBuffers stage;
  int last_backward_slot = 0;
  CudaGpt::BackwardHook hook;  // set_backward_hook

  // gpt_cuda_pass.cpp. The forward of one micro-batch in `slot` (token ids on the host; stage_in:
  // the previous stage's fp32 output on the device, non-first stages); returns the mean loss on
  // the last stage, else -1. The backward accumulates into the gradients (dout: d(stage output),
  // fp32 on the device, non-last stages; the last starts from its loss, dloss = loss_scale / N).
  template <typename S>
  float forward(int slot, const int32_t* inputs, const float* stage_in, const int32_t* targets);
  template <typename S>
  void backward(int slot, const float* dout, float loss_scale);
  // Sums x (count values, device) over the TP group in place; blocks until the sum is there.
  template <typename S>
  void tp_all_reduce(S* x, size_t count, float* f32);
  // The vocab-parallel cross-entropy's forward (gpt_vocab_parallel.cpp): per-row global lse into
  // loss_lse and losses, from this rank's logits slice and local targets.
  template <typename S>
  void vp_crossentropy_forward(Acts<S>& a);

  template <typename S>
  std::vector<Acts<S>>& slots();
  template <typename S>
  S* P(int i) {
    return static_cast<S*>(p) + offsets[static_cast<size_t>(i)];
  }
  // Gradient of non-layer tensor i (or of any tensor without ZeRO-2), and local layer l's slice
  // of layer tensor i (per: the slice size).
  template <typename S>
  S* G(int i) {
    return static_cast<S*>(g) + goffsets[static_cast<size_t>(i)];
  }
  template <typename S>
  S* LG(int i, int l, size_t per) {
    if (!zero2) return G<S>(i) + static_cast<size_t>(l) * per;
    return static_cast<S*>(g) + staging_at + static_cast<size_t>(l % 2) * layer_floats +
           layer_goff[static_cast<size_t>(i)];
  }
  // gpt_cuda_zero2.cpp. After local layer l's backward: its staging slot to fp32, all-reduced
  // asynchronously; then the other slot (layer l+1) drained into the shard. backward_done drains
  // both; finish reduces the non-layer tensors.
  template <typename S>
  void zero2_layer_done(int l);
  void zero2_drain(int k);
  float* zero2_sum_slot(int k);  // where slot k's fp32 sum runs: comm (bf16), or the slot itself
  void zero2_backward_done();
  template <typename S>
  void zero2_finish();
  // Adds comm values of local layer l's slices ([layer_goff[i], +per) of `src`), or of non-layer
  // tensor i's range [from, from + count), intersected with this rank's shard, into shard_grad.
  void add_layer_to_shard(const float* src, int l);
  void add_range_to_shard(const float* src, int i, size_t from, size_t count);
};

template <>
inline std::vector<CudaGpt::Impl::Acts<float>>& CudaGpt::Impl::slots<float>() {
  return af;
}
template <>
inline std::vector<CudaGpt::Impl::Acts<bf16>>& CudaGpt::Impl::slots<bf16>() {
  return ab;
}

}  // namespace flotilla::cuda
