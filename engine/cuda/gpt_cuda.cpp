// CudaGpt: construction, parameters and the optimizer (gpt_cuda_pass.cpp has the forward and
// backward, gpt_cuda_impl.h the state). Three device arenas: parameters+gradients, optimizer state
// (fp32 master weights under bf16, AdamW moments), activations (one set per pipeline slot).
#include "engine/cuda/gpt_cuda.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <utility>

#include "engine/core/error.h"
#include "engine/cuda/adamw.h"
#include "engine/cuda/context.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/global_norm.h"
#include "engine/cuda/gpt_cuda_impl.h"
#include "engine/cuda/residual.h"
#include "engine/parallel/process_group.h"

namespace flotilla::cuda {
namespace {

using detail::Arena;
using detail::carve_acts;
using detail::carve_stage_buffers;

GptShard checked_shard(const GptDims& d, const GptShard& s) { return resolve_shard(d, s); }

size_t param_count(const GptDims& d, const GptShard& s) {
  size_t n = 0;
  for (size_t k : local_param_sizes(d, s)) n += k;
  return n;
}

// Every slot's activations plus the stage buffers, carved from `a` (counting when it has no base).
template <typename S>
std::vector<detail::Acts<S>> carve_all(Arena& a, const GptDims& d, const GptShard& sh, int B, int T, bool recompute,
                                       int slots, detail::StageBuffers* stage) {
  std::vector<detail::Acts<S>> out;
  for (int k = 0; k < slots; ++k) out.push_back(carve_acts<S>(a, d, sh, B, T, recompute));
  *stage = carve_stage_buffers(a, d, sh, B, T, sizeof(S) != sizeof(float), local_param_sizes(d, sh)[kWte]);
  return out;
}

// Where gradients live (Impl::goffsets, layer_goff): without ZeRO-2 the parameter layout; with it
// the non-layer tensors compactly, then two staging slots of one layer each. Returns the count.
size_t grad_layout(const std::array<size_t, kNumParamTensors>& sizes, int layers, bool zero2,
                   std::array<size_t, kNumParamTensors>* goff, std::array<size_t, kNumParamTensors>* lgoff,
                   size_t* layer_floats, size_t* staging_at) {
  size_t off = 0;
  *layer_floats = 0;
  for (int i = 0; i < kNumParamTensors; ++i) {
    const auto k = static_cast<size_t>(i);
    if (zero2 && is_layer_param(i)) {
      (*lgoff)[k] = *layer_floats;
      *layer_floats += sizes[k] / static_cast<size_t>(layers);
    } else {
      (*goff)[k] = off;
      off += sizes[k];
    }
  }
  *staging_at = off;
  return off + (zero2 ? 2 * *layer_floats : 0);
}

// Bytes of the parameter+gradient arena and of the optimizer arena (Impl allocates exactly these).
size_t round256(size_t b) { return (b + 255) / 256 * 256; }
size_t param_arena_bytes(size_t n, size_t padded, bool use_bf16, size_t g_count, size_t layer_floats, size_t shard,
                         bool zero2) {
  const size_t es = use_bf16 ? 2 : 4;
  const size_t zero2_bytes = zero2 ? (use_bf16 ? round256(2 * layer_floats * 4) : 0) + round256(shard * 4) : 0;
  return round256((use_bf16 ? n : padded) * es) + round256(g_count * es) + zero2_bytes;
}
size_t optim_arena_bytes(size_t padded, size_t shard, bool use_bf16) {
  return (use_bf16 ? round256(padded * 4) : 0) + 2 * round256(shard * 4);
}

}  // namespace

size_t CudaGpt::predicted_bytes(const GptDims& dims, int B, int T, bool use_bf16, bool recompute, size_t shard_count,
                                size_t padded_params, const GptShard& model_shard, int slots, bool zero2) {
  const GptShard sh = checked_shard(dims, model_shard);
  const size_t n = param_count(dims, sh);
  const size_t padded = padded_params > n ? padded_params : n, shard = shard_count > 0 ? shard_count : n;
  std::array<size_t, kNumParamTensors> goff{}, lgoff{};
  size_t layer_floats = 0, staging_at = 0;
  const size_t g_count = grad_layout(local_param_sizes(dims, sh), sh.local_layers(), zero2, &goff, &lgoff,
                                     &layer_floats, &staging_at);
  Arena count;
  detail::StageBuffers stage;
  if (use_bf16)
    carve_all<bf16>(count, dims, sh, B, T, recompute, std::max(slots, 1), &stage);
  else
    carve_all<float>(count, dims, sh, B, T, recompute, std::max(slots, 1), &stage);
  return param_arena_bytes(n, padded, use_bf16, g_count, layer_floats, shard, zero2) +
         optim_arena_bytes(padded, shard, use_bf16) + count.used();
}

CudaGpt::CudaGpt(CudaBackend& backend, const GptDims& dims, int B, int T, const CudaGptOptions& options)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.be = &backend;
  s.ctx = &backend.context();
  s.d = dims;
  s.B = B;
  s.T = T;
  s.opt = options;
  s.sh = checked_shard(dims, options.shard);
  s.n = param_count(dims, s.sh);
  if (T > dims.max_seq_len) throw_config("CudaGpt: T " + std::to_string(T) + " exceeds max_seq_len");
  if (s.sh.tp > 1 && (options.tp == nullptr || options.tp->size() != s.sh.tp))
    throw Error(ExitCode::kInternal, "CudaGpt: a tp = " + std::to_string(s.sh.tp) + " shard needs its TP group");
  if (s.sh.pp > 1 && (options.pp == nullptr || options.pp->size() != s.sh.pp))
    throw Error(ExitCode::kInternal, "CudaGpt: a pp = " + std::to_string(s.sh.pp) + " shard needs its PP group");
  const int slots = std::max(options.slots, 1);
  s.ctx->deterministic = options.deterministic;
  s.sizes = local_param_sizes(dims, s.sh);
  size_t off = 0;
  for (int i = 0; i < kNumParamTensors; ++i) {
    s.offsets[static_cast<size_t>(i)] = off;
    off += s.sizes[static_cast<size_t>(i)];
  }
  const size_t es = options.bf16 ? 2 : 4;
  s.padded = options.padded_params > s.n ? options.padded_params : s.n;
  s.shard_begin = options.shard_begin;
  s.shard_count = options.shard_count > 0 ? options.shard_count : s.n;
  if (options.shard_count > 0 && options.stochastic_rounding != 0)
    throw Error(ExitCode::kInternal, "CudaGpt: a ZeRO shard with stochastic rounding would round differently on "
                                     "each rank");
  s.zero2 = options.zero2 != nullptr;
  if (s.zero2 && options.shard_count == 0)
    throw Error(ExitCode::kInternal, "CudaGpt: ZeRO-2 needs the rank's optimizer shard");
  s.g_count = grad_layout(s.sizes, s.sh.local_layers(), s.zero2, &s.goffsets, &s.layer_goff, &s.layer_floats,
                          &s.staging_at);
  const size_t pbytes =
      param_arena_bytes(s.n, s.padded, options.bf16, s.g_count, s.layer_floats, s.shard_count, s.zero2);
  s.params = std::make_unique<Arena>(pbytes);
  s.p = s.params->take<char>((options.bf16 ? s.n : s.padded) * es);
  s.g = s.params->take<char>(s.g_count * es);
  if (s.zero2) {
    if (options.bf16) s.comm = s.params->take<float>(2 * s.layer_floats);
    s.shard_grad = s.params->take<float>(s.shard_count);
  }
  const size_t obytes = optim_arena_bytes(s.padded, s.shard_count, options.bf16);
  s.optim = std::make_unique<Arena>(obytes);
  if (options.bf16) s.master = s.optim->take<float>(s.padded);
  s.m = s.optim->take<float>(s.shard_count);
  s.v = s.optim->take<float>(s.shard_count);
  Arena count;
  if (options.bf16)
    carve_all<bf16>(count, dims, s.sh, B, T, options.recompute, slots, &s.stage);
  else
    carve_all<float>(count, dims, s.sh, B, T, options.recompute, slots, &s.stage);
  s.acts = std::make_unique<Arena>(count.used());
  if (options.bf16)
    s.ab = carve_all<bf16>(*s.acts, dims, s.sh, B, T, options.recompute, slots, &s.stage);
  else
    s.af = carve_all<float>(*s.acts, dims, s.sh, B, T, options.recompute, slots, &s.stage);
  if (options.pp) options.pp->set_device_stream(s.ctx->stream());  // sends wait for their producers
  check_cuda(cudaMemsetAsync(s.params->base(), 0, pbytes, s.ctx->stream()), "cudaMemsetAsync (params)");
  check_cuda(cudaMemsetAsync(s.optim->base(), 0, obytes, s.ctx->stream()),
             "cudaMemsetAsync (optimizer)");
  s.ctx->synchronize();
}

CudaGpt::~CudaGpt() {
  if (impl_ && impl_->ctx) cudaStreamSynchronize(impl_->ctx->stream());
}

size_t CudaGpt::parameter_bytes() const { return impl_->params->used(); }
size_t CudaGpt::optimizer_bytes() const { return impl_->optim->used(); }
size_t CudaGpt::activation_bytes() const { return impl_->acts->used(); }

void CudaGpt::set_params(const float* host) {
  Impl& s = *impl_;
  float* dst = s.opt.bf16 ? s.master : static_cast<float*>(s.p);
  check_cuda(cudaMemcpyAsync(dst, host, s.n * sizeof(float), cudaMemcpyHostToDevice, s.ctx->stream()),
             "cudaMemcpyAsync (parameters to device)");
  if (s.opt.bf16) convert(*s.ctx, static_cast<bf16*>(s.p), s.master, s.n);
  s.ctx->synchronize();
}

void CudaGpt::get_params(float* host) const {
  const Impl& s = *impl_;
  const float* src = s.opt.bf16 ? s.master : static_cast<const float*>(s.p);
  check_cuda(cudaMemcpyAsync(host, src, s.n * sizeof(float), cudaMemcpyDeviceToHost, s.ctx->stream()),
             "cudaMemcpyAsync (parameters to host)");
  s.ctx->synchronize();
}

float CudaGpt::forward_backward(const int32_t* inputs, const int32_t* targets) {
  return forward_backward(inputs, targets, 1.0f, false);
}

float CudaGpt::forward_backward(const int32_t* inputs, const int32_t* targets, float loss_scale, bool accumulate) {
  Impl& s = *impl_;
  if (s.sh.pp > 1) throw Error(ExitCode::kInternal, "CudaGpt::forward_backward on a pipeline stage");
  if (!accumulate) zero_grad();
  const float loss = forward_stage(0, inputs, nullptr, targets);
  backward_stage(0, nullptr, loss_scale);
  return loss;
}

float CudaGpt::forward(const int32_t* inputs, const int32_t* targets) {
  if (impl_->sh.pp > 1) throw Error(ExitCode::kInternal, "CudaGpt::forward on a pipeline stage");
  return forward_stage(0, inputs, nullptr, targets);
}

void CudaGpt::zero_grad() {
  Impl& s = *impl_;
  check_cuda(cudaMemsetAsync(s.g, 0, s.g_count * (s.opt.bf16 ? 2 : 4), s.ctx->stream()),
             "cudaMemsetAsync (zero_grad)");
  if (s.zero2)
    check_cuda(cudaMemsetAsync(s.shard_grad, 0, s.shard_count * sizeof(float), s.ctx->stream()),
               "cudaMemsetAsync (zero_grad, ZeRO-2 shard)");
}

float CudaGpt::forward_stage(int slot, const int32_t* inputs, const float* stage_in, const int32_t* targets) {
  Impl& s = *impl_;
  return s.opt.bf16 ? s.forward<bf16>(slot, inputs, stage_in, targets)
                    : s.forward<float>(slot, inputs, stage_in, targets);
}

void CudaGpt::backward_stage(int slot, const float* dout, float loss_scale) {
  Impl& s = *impl_;
  if (s.opt.bf16)
    s.backward<bf16>(slot, dout, loss_scale);
  else
    s.backward<float>(slot, dout, loss_scale);
}

const float* CudaGpt::stage_output(int slot) {
  Impl& s = *impl_;
  const auto k = static_cast<size_t>(slot);
  const size_t last = static_cast<size_t>(s.sh.local_layers() - 1) * static_cast<size_t>(s.B) *
                      static_cast<size_t>(s.T) * static_cast<size_t>(s.d.n_embd);
  return s.opt.bf16 ? s.ab.at(k).out_f32 : s.af.at(k).residual3 + last;
}

const float* CudaGpt::stage_input_grad() {
  Impl& s = *impl_;
  const auto k = static_cast<size_t>(s.last_backward_slot);
  return s.opt.bf16 ? s.ab.at(k).dinput_f32 : s.af.at(k).dresidual;
}

float* CudaGpt::stage_recv_buffer(bool grad) { return grad ? impl_->stage.recv_grad : impl_->stage.recv_act; }

int CudaGpt::activation_slots() const {
  return static_cast<int>(impl_->opt.bf16 ? impl_->ab.size() : impl_->af.size());
}

void CudaGpt::all_reduce_wte_grad(parallel::ProcessGroup& group) {
  Impl& s = *impl_;
  Context& c = *s.ctx;
  const size_t count = s.sizes[kWte];
  if (count == 0) throw Error(ExitCode::kInternal, "CudaGpt::all_reduce_wte_grad on a stage without wte");
  group.set_device_stream(c.stream());
  if (!s.opt.bf16) {
    group.all_reduce(s.G<float>(kWte), count);
    return;
  }
  convert(c, s.stage.tied_f32, s.G<bf16>(kWte), count);
  group.all_reduce(s.stage.tied_f32, count);
  convert(c, s.G<bf16>(kWte), s.stage.tied_f32, count);
}

float CudaGpt::step(float lr, const AdamWHyper& h, float clip, int64_t t) {
  const float norm = grad_norm();
  update(lr, h, clip > 0.0f && norm > clip ? clip / norm : 1.0f, t);
  return norm;
}

float CudaGpt::grad_norm() {
  Impl& s = *impl_;
  Context& c = *s.ctx;
  auto squares = [&](size_t offset, size_t count) {
    return s.opt.bf16 ? sum_squares<bf16>(c, static_cast<const bf16*>(s.g) + offset, count)
                      : sum_squares<float>(c, static_cast<const float*>(s.g) + offset, count);
  };
  if (s.zero2) {
    // This rank's gradient shard: its part of every counted tensor, summed over DP, then TP, PP.
    const size_t lo = s.shard_begin, hi = s.shard_begin + s.shard_count;
    double sq = 0;
    for (int i = 0; i < kNumParamTensors; ++i) {
      const auto k = static_cast<size_t>(i);
      if (s.sizes[k] == 0 || !counts_once(s.sh, i)) continue;
      const size_t a = std::max(s.offsets[k], lo), b = std::min(s.offsets[k] + s.sizes[k], hi);
      if (a < b) sq += sum_squares<float>(c, s.shard_grad + (a - lo), b - a);
    }
    for (parallel::ProcessGroup* group : {s.opt.zero2, s.opt.tp, s.opt.pp})
      if (group != nullptr && group->size() > 1) group->all_reduce(&sq, 1);
    return static_cast<float>(std::sqrt(sq));
  }
  if (s.sh.whole()) return static_cast<float>(std::sqrt(squares(0, s.n)));
  // Tensor and pipeline parallelism: this rank's tensors, the replicated ones on TP rank 0 only
  // and the tied wte on the first stage only (counts_once, as the CPU trainer's
  // DataParallel::set_norm_reduction), summed over the TP group, then over the PP group.
  double sq = 0;
  for (int i = 0; i < kNumParamTensors; ++i) {
    const auto k = static_cast<size_t>(i);
    if (s.sizes[k] > 0 && counts_once(s.sh, i)) sq += squares(s.offsets[k], s.sizes[k]);
  }
  for (parallel::ProcessGroup* group : {s.opt.tp, s.opt.pp})
    if (group != nullptr && group->size() > 1) group->all_reduce(&sq, 1);
  return static_cast<float>(std::sqrt(sq));
}

void CudaGpt::update(float lr, const AdamWHyper& h, float scale, int64_t t) {
  Impl& s = *impl_;
  Context& c = *s.ctx;
  if (t < 1) throw Error(ExitCode::kInternal, "CudaGpt::update: step " + std::to_string(t) + " must be >= 1");
  if (!s.opt.bf16 && scale != 1.0f) {
    if (s.zero2)
      scale_values(c, s.shard_grad, s.shard_count, scale);
    else
      scale_values(c, static_cast<float*>(s.g), s.n, scale);
  }
  const size_t lo = s.shard_begin, hi = s.shard_begin + s.shard_count;
  for (int i = 0; i < kNumParamTensors; ++i) {
    // This rank's part of tensor i (all of it without ZeRO); m and v are indexed from lo.
    const size_t off = s.offsets[static_cast<size_t>(i)], size = s.sizes[static_cast<size_t>(i)];
    const size_t a = off > lo ? off : lo, b = off + size < hi ? off + size : hi;
    if (a >= b) continue;
    const float wd = param_decays(i) ? h.weight_decay : 0.0f;
    if (s.zero2 && s.opt.bf16)  // the fp32 gradient shard, indexed from lo like m and v
      adamw_update_mixed<float>(c, static_cast<bf16*>(s.p) + a, s.master + a, s.shard_grad + (a - lo),
                                s.m + (a - lo), s.v + (a - lo), b - a, scale, lr, h.beta1, h.beta2, h.eps, wd, t,
                                s.opt.stochastic_rounding);
    else if (s.zero2)
      adamw_update(c, static_cast<float*>(s.p) + a, s.shard_grad + (a - lo), s.m + (a - lo), s.v + (a - lo), b - a,
                   lr, h.beta1, h.beta2, h.eps, wd, t);
    else if (s.opt.bf16)
      adamw_update_mixed<bf16>(c, static_cast<bf16*>(s.p) + a, s.master + a, static_cast<const bf16*>(s.g) + a,
                               s.m + (a - lo), s.v + (a - lo), b - a, scale, lr, h.beta1, h.beta2, h.eps, wd, t,
                               s.opt.stochastic_rounding);
    else
      adamw_update(c, static_cast<float*>(s.p) + a, static_cast<const float*>(s.g) + a, s.m + (a - lo),
                   s.v + (a - lo), b - a, lr, h.beta1, h.beta2, h.eps, wd, t);
  }
}

void CudaGpt::finish_gradients() {
  Impl& s = *impl_;
  if (!s.zero2) return;
  if (s.opt.bf16)
    s.zero2_finish<bf16>();
  else
    s.zero2_finish<float>();
}

float* CudaGpt::updated_params() {
  Impl& s = *impl_;
  return s.opt.bf16 ? s.master : static_cast<float*>(s.p);
}

void CudaGpt::params_from_master() {
  Impl& s = *impl_;
  if (s.opt.bf16) convert(*s.ctx, static_cast<bf16*>(s.p), s.master, s.n);
}

void CudaGpt::set_moments(const float* m, const float* v) {
  Impl& s = *impl_;
  check_cuda(cudaMemcpyAsync(s.m, m, s.shard_count * sizeof(float), cudaMemcpyHostToDevice, s.ctx->stream()),
             "cudaMemcpyAsync (AdamW m to device)");
  check_cuda(cudaMemcpyAsync(s.v, v, s.shard_count * sizeof(float), cudaMemcpyHostToDevice, s.ctx->stream()),
             "cudaMemcpyAsync (AdamW v to device)");
  s.ctx->synchronize();
}

void CudaGpt::get_moments(float* m, float* v) const {
  const Impl& s = *impl_;
  check_cuda(cudaMemcpyAsync(m, s.m, s.shard_count * sizeof(float), cudaMemcpyDeviceToHost, s.ctx->stream()),
             "cudaMemcpyAsync (AdamW m to host)");
  check_cuda(cudaMemcpyAsync(v, s.v, s.shard_count * sizeof(float), cudaMemcpyDeviceToHost, s.ctx->stream()),
             "cudaMemcpyAsync (AdamW v to host)");
  s.ctx->synchronize();
}

void CudaGpt::set_backward_hook(BackwardHook hook) { impl_->hook = std::move(hook); }
void* CudaGpt::grads() { return impl_->g; }
size_t CudaGpt::num_params() const { return impl_->n; }
bool CudaGpt::bf16_storage() const { return impl_->opt.bf16; }
Context& CudaGpt::context() { return *impl_->ctx; }

}  // namespace flotilla::cuda
