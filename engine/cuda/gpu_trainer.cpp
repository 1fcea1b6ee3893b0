// GpuTrainer: the model on the CUDA backend, the parameters, the optimizer and the memory plan
// (gpu_trainer_zero2.cpp has ZeRO-2's gradient shard). Two kinds of device memory: the Model's own
// buffers (parameters, gradients, activations: engine/model) and one optimizer arena here (fp32
// master weights under bf16, AdamW moments, ZeRO-2's shard).
#include "engine/cuda/gpu_trainer.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "engine/comm/process_group.h"
#include "engine/core/error.h"
#include "engine/cuda/context.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/global_norm.h"
#include "engine/cuda/gpu_trainer_impl.h"
#include "engine/cuda/residual.h"
#include "engine/model/base_weights.h"
#include "engine/model/model_shard.h"

namespace flotilla::cuda {
namespace {

ModelOptions model_options(const GpuTrainerOptions& o, size_t param_capacity) {
  ModelOptions m;
  m.dtype = o.bf16 ? DType::kBF16 : DType::kF32;
  m.keep_gelu = true;  // GPU memory is plentiful next to the CPU case: no GELU recompute
  m.fuse_gelu = o.fuse_gelu;
  m.param_capacity = o.bf16 ? 0 : param_capacity;  // fp32: ZeRO-1 all-gathers into the parameters
  m.stage_buffers = o.shard.pp > 1;
  m.lora = o.lora;
  m.logits_chunk_rows = o.logits_chunk_rows;
  return m;
}

// The table of what trains: the architecture's, or the LoRA adapters'.
ParamLayout trainable_layout(const ModelDims& dims, const LoraSpec& lora) {
  return lora.enabled() ? ParamLayout(dims, lora) : ParamLayout(dims);
}

size_t round256(size_t b) { return (b + 255) / 256 * 256; }

// The optimizer arena's pieces, in order (Impl allocates exactly these).
struct OptimPlan {
  size_t master = 0, moments = 0, comm = 0, shard_grad = 0, tied = 0;
};
OptimPlan optim_plan(size_t padded, size_t shard, bool use_bf16, bool zero2, size_t layer_floats,
                     size_t tied_floats) {
  OptimPlan p;
  p.master = use_bf16 ? padded : 0;
  p.moments = shard;
  p.comm = zero2 && use_bf16 ? 2 * layer_floats : 0;
  p.shard_grad = zero2 ? shard : 0;
  p.tied = use_bf16 ? tied_floats : 0;
  return p;
}
size_t optim_bytes(const OptimPlan& p) {
  return round256(p.master * 4) + 2 * round256(p.moments * 4) + round256(p.comm * 4) +
         round256(p.shard_grad * 4) + round256(p.tied * 4);
}

// Local floats of one layer's per-layer tensors, and of the tied embedding (pipeline stages).
size_t layer_floats(const ParamLayout& layout, const std::vector<size_t>& sizes, int layers) {
  size_t n = 0;
  for (int i = 0; i < layout.size(); ++i)
    if (layout[i].per_layer()) n += sizes[static_cast<size_t>(i)] / static_cast<size_t>(layers);
  return n;
}
size_t tied_floats(const ParamLayout& layout, const ModelShard& sh, const std::vector<size_t>& sizes) {
  return sh.pp > 1 && layout.tied() ? sizes[static_cast<size_t>(layout.embedding())] : 0;
}

// Bytes of the Model's own buffers (each its own cudaMalloc, rounded as the driver rounds nothing
// below 256 bytes): parameters (capacity), gradients (full, or compact + two staging slots).
size_t model_param_bytes(const ParamLayout& layout, const std::vector<size_t>& sizes, int layers,
                         size_t capacity, size_t es, bool zero2) {
  size_t n = 0, compact = 0;
  for (int i = 0; i < layout.size(); ++i) {
    n += sizes[static_cast<size_t>(i)];
    if (!layout[i].per_layer()) compact += sizes[static_cast<size_t>(i)];
  }
  const size_t grads = zero2 ? round256(compact * es) + round256(2 * layer_floats(layout, sizes, layers) * es)
                             : round256(n * es);
  return round256(std::max(capacity, n) * es) + grads;
}

}  // namespace

size_t GpuTrainer::predicted_bytes(const ModelDims& dims, int B, int T, bool use_bf16, bool recompute,
                                   size_t shard_count, size_t padded_params, const ModelShard& model_shard,
                                   int slots, bool zero2, const LoraSpec& lora, int logits_chunk_rows) {
  const ModelShard sh = resolve_shard(dims, model_shard);
  const ParamLayout layout = trainable_layout(dims, lora);
  const std::vector<size_t> sizes = local_param_sizes(layout, sh);
  size_t n = 0;
  for (size_t k : sizes) n += k;
  const size_t padded = padded_params > n ? padded_params : n, shard = shard_count > 0 ? shard_count : n;
  GpuTrainerOptions o;
  o.bf16 = use_bf16;
  o.shard = sh;
  o.lora = lora;
  o.logits_chunk_rows = logits_chunk_rows;
  const ModelOptions mo = model_options(o, padded);
  // LoRA's frozen base: its parameters in the storage dtype, no gradients. QLoRA's projections are
  // not among them: they live in one buffer of NF4 codes and statistics (4.127 bits a weight).
  size_t base = 0;
  if (lora.enabled()) {
    const ParamLayout arch(dims);
    const std::vector<size_t> local = local_param_sizes(arch, sh);
    for (int i = 0; i < arch.size(); ++i)
      if (!(lora.nf4 && is_projection_tensor(i))) base += local[static_cast<size_t>(i)];
  }
  const size_t base_bytes = lora.enabled() ? round256(base * (use_bf16 ? 2 : 4)) : 0;
  const size_t nf4_bytes = lora.nf4 ? round256(nf4_base_bytes_for(dims, sh, lora, 256)) : 0;
  const size_t acts = activation_bytes_for(dims, sh, B, T, recompute, mo, 256, std::max(slots, 1));
  const size_t rope = dims.llama() ? round256(static_cast<size_t>(dims.hd() / 2) * 4) : 0;
  const OptimPlan op =
      optim_plan(padded, shard, use_bf16, zero2, layer_floats(layout, sizes, sh.local_layers()),
                 tied_floats(layout, sh, sizes));
  return model_param_bytes(layout, sizes, sh.local_layers(), mo.param_capacity, use_bf16 ? 2 : 4, zero2) +
         base_bytes + nf4_bytes + rope + acts + optim_bytes(op);
}

GpuTrainer::GpuTrainer(CudaBackend& backend, const ModelDims& dims, int B, int T,
                       const GpuTrainerOptions& options)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.be = &backend;
  s.ctx = &backend.context();
  s.d = dims;
  s.B = B;
  s.T = T;
  s.opt = options;
  s.sh = resolve_shard(dims, options.shard);
  if (T > dims.max_seq_len) throw_config("GpuTrainer: T " + std::to_string(T) + " exceeds max_seq_len");
  if (s.sh.tp > 1 && (options.tp == nullptr || options.tp->size() != s.sh.tp))
    throw Error(ExitCode::kInternal,
                "GpuTrainer: a tp = " + std::to_string(s.sh.tp) + " shard needs its TP group");
  if (s.sh.pp > 1 && (options.pp == nullptr || options.pp->size() != s.sh.pp))
    throw Error(ExitCode::kInternal,
                "GpuTrainer: a pp = " + std::to_string(s.sh.pp) + " shard needs its PP group");
  s.ctx->deterministic = options.deterministic;
  const ParamLayout layout = trainable_layout(dims, options.lora);
  const std::vector<size_t> sizes = local_param_sizes(layout, s.sh);
  s.n = 0;
  for (size_t k : sizes) s.n += k;
  s.padded = options.padded_params > s.n ? options.padded_params : s.n;
  s.shard_begin = options.shard_begin;
  s.shard_count = options.shard_count > 0 ? options.shard_count : s.n;
  if (options.shard_count > 0 && options.stochastic_rounding != 0)
    throw Error(ExitCode::kInternal,
                "GpuTrainer: a ZeRO shard with stochastic rounding would round differently on "
                "each rank");
  s.zero2 = options.zero2 != nullptr;
  if (s.zero2 && options.shard_count == 0)
    throw Error(ExitCode::kInternal, "GpuTrainer: ZeRO-2 needs the rank's optimizer shard");

  s.model = std::make_unique<Model>(dims, s.sh, &backend, model_options(options, s.padded));
  Model& m = *s.model;
  m.set_tensor_parallel_group(options.tp);
  m.set_activation_slots(std::max(options.slots, 1));
  m.set_recompute(options.recompute);
  if (s.zero2) m.enable_layer_grad_staging();
  m.reserve(B, T);
  m.set_layer_backward_hook([this](int layer) { impl_->on_layer_done(layer); });

  const OptimPlan op =
      optim_plan(s.padded, s.shard_count, options.bf16, s.zero2,
                 layer_floats(layout, sizes, s.sh.local_layers()), tied_floats(layout, s.sh, sizes));
  s.optim = std::make_unique<detail::Arena>(optim_bytes(op));
  s.master = s.optim->take<float>(op.master);
  float* moment1 = s.optim->take<float>(op.moments);
  float* moment2 = s.optim->take<float>(op.moments);
  s.comm = op.comm > 0 ? s.optim->take<float>(op.comm) : nullptr;
  s.shard_grad = op.shard_grad > 0 ? s.optim->take<float>(op.shard_grad) : nullptr;
  s.tied_f32 = op.tied > 0 ? s.optim->take<float>(op.tied) : nullptr;
  if (!options.bf16) s.master = nullptr;
  s.adamw = std::make_unique<AdamW>(backend, param_groups(m), s.shard_begin, s.shard_count, moment1, moment2);
  if (options.pp) options.pp->set_device_stream(s.ctx->stream());  // sends wait for their producers
  check_cuda(cudaMemsetAsync(s.optim->base(), 0, s.optim->used(), s.ctx->stream()),
             "cudaMemsetAsync (optimizer)");
  s.ctx->synchronize();
}

GpuTrainer::~GpuTrainer() {
  if (impl_ && impl_->ctx) cudaStreamSynchronize(impl_->ctx->stream());
}

void GpuTrainer::Impl::on_layer_done(int layer) {
  if (zero2) {
    if (layer >= 0) {
      if (opt.bf16)
        zero2_layer_done<bf16>(layer);
      else
        zero2_layer_done<float>(layer);
    } else {
      zero2_backward_done();
    }
  }
  if (hook) hook(layer);
}

size_t GpuTrainer::parameter_bytes() const {
  const Impl& s = *impl_;
  // LoRA's base in the storage dtype; under QLoRA that is all but the projections, which count
  // as their NF4 bytes.
  const size_t frozen = s.opt.lora.enabled() ? s.model->num_base_params() : 0;
  return (s.model->num_params() + frozen) * s.es() + s.model->base_quant_bytes() + s.model->grad_bytes();
}
size_t GpuTrainer::optimizer_bytes() const { return impl_->optim->used(); }
size_t GpuTrainer::activation_bytes() const { return impl_->model->activation_bytes(); }
Model& GpuTrainer::model() { return *impl_->model; }

void GpuTrainer::set_params(const float* host) {
  Impl& s = *impl_;
  if (!s.opt.bf16) {
    s.be->upload(s.model->param_data(), host, s.n * sizeof(float));
    s.ctx->synchronize();
    return;
  }
  s.be->upload(s.master, host, s.n * sizeof(float));
  params_from_master();
  s.ctx->synchronize();
}

void GpuTrainer::get_params(float* host) const {
  const Impl& s = *impl_;
  const void* src = s.opt.bf16 ? static_cast<const void*>(s.master) : s.model->param_data();
  s.be->download(host, src, s.n * sizeof(float));
}

float GpuTrainer::forward_backward(const int32_t* inputs, const int32_t* targets) {
  return forward_backward(inputs, targets, 1.0f, false);
}

float GpuTrainer::forward_backward(const int32_t* inputs, const int32_t* targets, float loss_scale,
                                   bool accumulate, const int32_t* positions) {
  Impl& s = *impl_;
  if (s.sh.pp > 1) throw Error(ExitCode::kInternal, "GpuTrainer::forward_backward on a pipeline stage");
  if (!accumulate) zero_grad();
  const float loss = forward_stage(0, inputs, nullptr, targets, positions);
  backward_stage(0, nullptr, loss_scale);
  return loss;
}

float GpuTrainer::forward(const int32_t* inputs, const int32_t* targets, const int32_t* positions) {
  if (impl_->sh.pp > 1) throw Error(ExitCode::kInternal, "GpuTrainer::forward on a pipeline stage");
  return forward_stage(0, inputs, nullptr, targets, positions);
}

void GpuTrainer::zero_grad() {
  Impl& s = *impl_;
  s.model->zero_grad();
  if (s.zero2)
    check_cuda(cudaMemsetAsync(s.shard_grad, 0, s.shard_count * sizeof(float), s.ctx->stream()),
               "cudaMemsetAsync (zero_grad, ZeRO-2 shard)");
}

float GpuTrainer::forward_stage(int slot, const int32_t* inputs, const float* stage_in,
                                const int32_t* targets, const int32_t* positions) {
  Impl& s = *impl_;
  return s.model->forward_stage(slot, inputs, stage_in, targets, s.B, s.T, positions);
}

void GpuTrainer::backward_stage(int slot, const float* dout, float loss_scale) {
  impl_->model->backward_stage(slot, dout, loss_scale);
}

const float* GpuTrainer::stage_output(int slot) { return impl_->model->stage_output(slot); }
const float* GpuTrainer::stage_input_grad() { return impl_->model->stage_input_grad(); }
float* GpuTrainer::stage_recv_buffer(bool grad) { return impl_->model->stage_recv_buffer(grad); }
int GpuTrainer::activation_slots() const { return impl_->model->activation_slots(); }

void GpuTrainer::all_reduce_wte_grad(comm::ProcessGroup& group) {
  Impl& s = *impl_;
  Context& c = *s.ctx;
  const int tied = s.model->tied_tensor();
  const size_t count = tied >= 0 ? s.size(tied) : 0;
  if (count == 0)
    throw Error(ExitCode::kInternal, "GpuTrainer::all_reduce_wte_grad on a stage without the tied embedding");
  char* g = static_cast<char*>(s.model->grad_data()) + s.model->grad_offset(tied) * s.es();
  group.set_device_stream(c.stream());
  if (!s.opt.bf16) {
    group.all_reduce(reinterpret_cast<float*>(g), count);
    return;
  }
  convert(c, s.tied_f32, reinterpret_cast<bf16*>(g), count);
  group.all_reduce(s.tied_f32, count);
  convert(c, reinterpret_cast<bf16*>(g), s.tied_f32, count);
}

float GpuTrainer::step(const AdamWHyper& h, float clip, int64_t t) {
  const float norm = grad_norm();
  update(h, clip > 0.0f && norm > clip ? clip / norm : 1.0f, t);
  return norm;
}

float GpuTrainer::grad_norm() {
  Impl& s = *impl_;
  Context& c = *s.ctx;
  const ParamLayout& layout = s.layout();
  const ModelShard& sh = s.sh;
  if (s.zero2) {
    // This rank's gradient shard: its part of every counted tensor, summed over DP, then TP, PP.
    const size_t lo = s.shard_begin, hi = s.shard_begin + s.shard_count;
    double sq = 0;
    for (int i = 0; i < layout.size(); ++i) {
      if (s.size(i) == 0 || !counts_once(layout, sh, i)) continue;
      const size_t a = std::max(s.offset(i), lo), b = std::min(s.offset(i) + s.size(i), hi);
      if (a < b) sq += sum_squares<float>(c, s.shard_grad + (a - lo), b - a);
    }
    for (comm::ProcessGroup* group : {s.opt.zero2, s.opt.tp, s.opt.pp})
      if (group != nullptr && group->size() > 1) group->all_reduce(&sq, 1);
    return static_cast<float>(std::sqrt(sq));
  }
  const void* g = s.model->grad_data();
  auto squares = [&](size_t offset, size_t count) {
    return s.opt.bf16 ? sum_squares<bf16>(c, static_cast<const bf16*>(g) + offset, count)
                      : sum_squares<float>(c, static_cast<const float*>(g) + offset, count);
  };
  if (sh.whole()) return static_cast<float>(std::sqrt(squares(0, s.n)));
  // Tensor and pipeline parallelism: this rank's tensors, the replicated ones on TP rank 0 only
  // and the tied embedding on the first stage only (counts_once, as the CPU trainer's
  // DataParallel::set_norm_reduction), summed over the TP group, then over the PP group.
  double sq = 0;
  for (int i = 0; i < layout.size(); ++i)
    if (s.size(i) > 0 && counts_once(layout, sh, i)) sq += squares(s.offset(i), s.size(i));
  for (comm::ProcessGroup* group : {s.opt.tp, s.opt.pp})
    if (group != nullptr && group->size() > 1) group->all_reduce(&sq, 1);
  return static_cast<float>(std::sqrt(sq));
}

void GpuTrainer::update(const AdamWHyper& h, float scale, int64_t t) {
  Impl& s = *impl_;
  // This rank's range of the one AdamW (engine/train/adamw.h): the model's fp32 parameters, or its
  // bf16 working copy with the fp32 master weights; the gradients of the model (fp32 or bf16), or
  // ZeRO-2's fp32 shard (indexed from shard_begin), scaled as they are read.
  AdamW::Step st;
  st.params = s.model->param_data();
  st.master = s.opt.bf16 ? s.master : nullptr;
  st.grads = s.zero2 ? static_cast<const void*>(s.shard_grad) : s.model->grad_data();
  st.grad_begin = s.zero2 ? s.shard_begin : 0;
  st.grad_type = s.opt.bf16 && !s.zero2 ? DType::kBF16 : DType::kF32;
  st.grad_scale = scale;
  st.rounding_seed = s.opt.stochastic_rounding;
  s.adamw->step(st, h, t);
}

void GpuTrainer::finish_gradients() {
  Impl& s = *impl_;
  if (!s.zero2) return;
  if (s.opt.bf16)
    s.zero2_finish<bf16>();
  else
    s.zero2_finish<float>();
}

float* GpuTrainer::updated_params() {
  Impl& s = *impl_;
  return s.opt.bf16 ? s.master : static_cast<float*>(s.model->param_data());
}

void GpuTrainer::params_from_master() {
  Impl& s = *impl_;
  if (s.opt.bf16) convert(*s.ctx, static_cast<bf16*>(s.model->param_data()), s.master, s.n);
}

void GpuTrainer::set_moments(const float* m, const float* v) {
  Impl& s = *impl_;
  s.adamw->set_moments(m, v);
  s.ctx->synchronize();
}

void GpuTrainer::get_moments(float* m, float* v) const {
  const Impl& s = *impl_;
  s.adamw->get_moments(m, v);
}

void GpuTrainer::set_backward_hook(BackwardHook hook) { impl_->hook = std::move(hook); }
void* GpuTrainer::grads() { return impl_->model->grad_data(); }
size_t GpuTrainer::num_params() const { return impl_->n; }
bool GpuTrainer::bf16_storage() const { return impl_->opt.bf16; }
Context& GpuTrainer::context() { return *impl_->ctx; }

}  // namespace flotilla::cuda
