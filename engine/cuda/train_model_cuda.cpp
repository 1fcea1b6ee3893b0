// The trainer's CUDA model: GpuTrainer behind the DeviceModel seam (engine/train/device_model.h).
//
// Non-obvious decisions:
// - Data-parallel gradients are summed while the backward runs: during the last micro-step's
//   backward, GpuTrainer's backward hook packs each finished layer's gradient slices into its bucket
//   of an fp32 buffer (grad_buckets(), train_model_cuda.h; bf16 widened on the way, since the
//   ProcessGroup has no bf16 type) on the compute stream and submits an asynchronous all-reduce of
//   that bucket. The NCCL group's stream waits for an event recorded on the compute stream at
//   submission (set_device_stream), so layer l's sum runs on the NCCL stream while layer l-1's
//   backward runs on the compute stream; the host never waits during the backward. average_grads
//   (just before the optimizer needs the norm) waits for the buckets, scales by 1/dp once and
//   unpacks them into the gradient buffer.
// - The seam's forward_backward does not say which micro-step is the last one, so the model
//   learns it: the number of forward_backward calls between two average_grads calls. The first
//   step (and any step where the guess would be wrong) takes the plain path: pack everything after
//   the backward, one all-reduce per bucket. A wrong guess is harmless: the buckets are copies, so
//   the still-accumulating gradients are untouched; the early sums are waited for and discarded
//   (every rank guesses alike, so the collectives still match across ranks).
// - Under tensor or pipeline parallelism the data-parallel buckets are reduced after the backward
//   (after the whole schedule), not during it: the backward's TP all-reduces and the stages' sends
//   run on other NCCL communicators, and two communicators
//   whose kernels are launched in different orders on different ranks can deadlock on the GPU
//   (NCCL's documentation); the DP stream would be launched from the group's own thread.
// - The GEMM peak for MFU is measured before the model is allocated, so the cudaMemGetInfo delta
//   around the allocation is the model's alone (the planner's prediction is checked against it).
#include "engine/cuda/train_model_cuda.h"

#include <string>
#include <utility>
#include <vector>

#include "engine/backend/registry.h"
#include "engine/comm/process_group.h"
#include "engine/core/error.h"
#include "engine/cuda/bench_cuda.h"
#include "engine/cuda/context.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/gpu_trainer.h"
#include "engine/cuda/residual.h"
#include "engine/parallel/pipeline.h"
#include "engine/plan/planner.h"

namespace flotilla::cuda {
namespace {

// The planner's per-device memory for this config without the process baseline (CUDA context,
// libraries): the part the model allocates, comparable with the cudaMemGetInfo delta. The GPU
// profile only sets the capacity, which this figure does not depend on.
size_t planner_model_bytes(const RunConfig& cfg) {
  DeviceProfile gpu;
  if (!find_gpu_profile("h100-sxm", cfg.train.dtype, &gpu)) return 0;
  const Plan plan = make_plan(cfg, gpu);
  const MemoryBreakdown& m = plan.peak();
  return static_cast<size_t>(m.total() - m.runtime);
}

class CudaTrainModel final : public DeviceModel {
 public:
  CudaTrainModel(const RunConfig& cfg, const ModelDims& dims, const OptimizerShard& shard,
                 const ModelParallel& model)
      : backend_(dynamic_cast<CudaBackend&>(get_backend("cuda"))),
        bf16_(cfg.train.dtype == "bf16"),
        shard_(shard) {
    const ModelShard sh = resolve_shard(dims, model.shard);
    tensor_parallel_ = sh.tp > 1;
    int slots = 1;
    auto need_nccl = [](comm::ProcessGroup* g, const char* key, int degree) {
      if (g != nullptr && std::string(g->backend()) == "nccl") return;
      throw_config(std::string("run.device = cuda with ") + key + " = " + std::to_string(degree) +
                   " needs parallel.backend = \"nccl\" (or \"auto\")" +
                   (g ? std::string(", not \"") + g->backend() + "\"" : std::string()));
    };
    if (tensor_parallel_) need_nccl(model.tp, "parallel.tp", sh.tp);
    if (sh.pp > 1) {
      need_nccl(model.pp, "parallel.pp", sh.pp);
      slots = pipeline_slots(cfg.parallel.schedule, sh.pp, sh.stage, cfg.parallel.micro_batches);
    }
    backend_.set_deterministic(cfg.train.deterministic);
    check_cuda(cudaGetDevice(&device_), "cudaGetDevice");
    peak_tflops_ = gemm_peak_tflops(backend_.context(), kPeakGemmN, bf16_, 3);
    GpuTrainerOptions o;
    o.bf16 = bf16_;
    o.fuse_gelu = bf16_;  // fp32: the separate GELU kernel, the CPU model's sequence
    o.deterministic = cfg.train.deterministic;
    o.recompute = cfg.train.recompute;
    o.shard = sh;
    o.tp = model.tp;
    o.pp = model.pp;
    o.slots = slots;
    if (shard_.group != nullptr) {
      o.shard_begin = shard_.begin;
      o.shard_count = shard_.count;
      o.padded_params = shard_.count * static_cast<size_t>(shard_.group->size());
      if (cfg.parallel.zero >= 2) {
        need_nccl(shard_.group, "parallel.zero", cfg.parallel.zero);
        o.zero2 = shard_.group;
        zero2_ = true;
      }
    }
    const int B = cfg.train.micro_batch, T = cfg.train.seq_len;
    o.lora = lora_spec(cfg);
    o.logits_chunk_rows =
        logits_chunk_rows(dims, sh, bf16_ ? 2 : 4, cfg.train.logits_chunk_mb, static_cast<long>(B) * T);
    predicted_ = GpuTrainer::predicted_bytes(dims, B, T, bf16_, cfg.train.recompute, o.shard_count,
                                             o.padded_params, sh, slots, zero2_, o.lora, o.logits_chunk_rows);
    const ParamLayout trained = o.lora.enabled() ? ParamLayout(dims, o.lora) : ParamLayout(dims);
    buckets_ = grad_buckets(trained, local_param_sizes(trained, sh), sh.local_layers());
    // Data parallelism packs every gradient bucket into one fp32 buffer: part of the footprint
    // (not under ZeRO-2, which sums each layer in its own staging slots).
    const bool data_parallel = cfg.parallel.dp > 1 && !zero2_;
    if (data_parallel) predicted_ += packed_grad_count(buckets_) * sizeof(float);
    planned_ = planner_model_bytes(cfg);
    size_t free_before = 0, free_after = 0, total = 0;
    backend_.synchronize();
    check_cuda(cudaMemGetInfo(&free_before, &total), "cudaMemGetInfo");
    if (predicted_ > free_before)
      throw Error(ExitCode::kOutOfMemory,
                  "train.micro_batch " + std::to_string(B) + " x train.seq_len " + std::to_string(T) + " (" +
                      cfg.train.dtype + ") needs " + std::to_string(predicted_ >> 20) + " MiB on GPU " +
                      std::to_string(device_) + ", which has " + std::to_string(free_before >> 20) +
                      " MiB free: lower train.micro_batch (gradient accumulation keeps the global batch)");
    gpt_ = std::make_unique<GpuTrainer>(backend_, dims, B, T, o);
    if (sh.pp > 1) stage_ = std::make_unique<Stage>(*gpt_, dims, sh);
    if (data_parallel) allocate_packed();
    check_cuda(cudaMemGetInfo(&free_after, &total), "cudaMemGetInfo");
    measured_ = free_before > free_after ? free_before - free_after : 0;
  }
  ~CudaTrainModel() override {
    gpt_->set_backward_hook(nullptr);
    works_.clear();  // waits for any in-flight bucket before its buffer goes
    if (packed_) cudaFree(packed_);
  }
  CudaTrainModel(const CudaTrainModel&) = delete;
  CudaTrainModel& operator=(const CudaTrainModel&) = delete;

  std::string describe() const override { return backend_.describe() + (bf16_ ? ", bf16" : ", fp32"); }
  void set_params(const float* host) override { gpt_->set_params(host); }
  void get_params(float* host) override { gpt_->get_params(host); }
  void set_moments(const float* m, const float* v) override { gpt_->set_moments(m, v); }
  void get_moments(float* m, float* v) override { gpt_->get_moments(m, v); }
  float forward_backward(const int32_t* inputs, const int32_t* targets, float loss_scale, bool accumulate,
                         const int32_t* positions) override {
    micro_ = accumulate ? micro_ + 1 : 0;
    discard_buckets();  // a guess that was not the last micro-step after all
    const bool overlap =
        dp_ != nullptr && learned_accum_ > 0 && micro_ == learned_accum_ - 1 && !tensor_parallel_ && !zero2_;
    if (!overlap) return gpt_->forward_backward(inputs, targets, loss_scale, accumulate, positions);
    struct Unhook {
      GpuTrainer& g;
      ~Unhook() { g.set_backward_hook(nullptr); }
    } unhook{*gpt_};
    gpt_->set_backward_hook([this](int layer) { reduce_bucket(layer); });
    const float loss = gpt_->forward_backward(inputs, targets, loss_scale, accumulate, positions);
    overlapped_ = works_.size() == reduced_buckets();
    return loss;
  }
  float forward(const int32_t* inputs, const int32_t* targets, const int32_t* positions) override {
    return gpt_->forward(inputs, targets, positions);
  }

  void average_grads(comm::ProcessGroup& dp) override {
    // The trainer calls this only for dp > 1; a one-rank NCCL group still runs the bucket path
    // (an identity: the GPU test checks it against a model that skips the call).
    if (dp.size() == 1 && std::string(dp.backend()) != "nccl") return;
    if (std::string(dp.backend()) != "nccl")
      throw_config("run.device = cuda with parallel.dp = " + std::to_string(dp.size()) +
                   " needs parallel.backend = \"nccl\" (or \"auto\"), not \"" + dp.backend() + "\"");
    if (zero2_) {  // the layers were averaged during the backwards; the embeddings and lnf now
      gpt_->finish_gradients();
      return;
    }
    learned_accum_ = micro_ + 1;
    if (!overlapped_ || dp_ != &dp) {
      // The plain path: the backward is done; pack and reduce every bucket now.
      discard_buckets();
      dp_ = &dp;
      dp.set_device_stream(gpt_->context().stream());
      for (const GradBucket& b : buckets_) reduce_bucket(b.layer);
    }
    overlapped_ = false;
    for (auto& w : works_) w->wait();
    works_.clear();
    unpack(1.0f / static_cast<float>(dp.size()));
  }

  float grad_norm() override { return gpt_->grad_norm(); }
  void update(const AdamWHyper& h, float grad_scale, int64_t t) override {
    gpt_->update(h, grad_scale, t);
    if (shard_.group == nullptr) return;
    // ZeRO-1: every rank updated its shard of the fp32 vector (master weights under bf16); an
    // in-place all-gather (rank r's input is its own slice of the output) completes it everywhere.
    float* full = gpt_->updated_params();
    shard_.group->set_device_stream(gpt_->context().stream());
    shard_.group->all_gather(full + shard_.begin, full, shard_.count);
    gpt_->params_from_master();
  }
  void set_base_params(const float* full) override {
    gpt_->model().set_base_from_full(full);
    backend_.synchronize();
  }
  // QLoRA: the host's quantised modules; this shard's slice of each is uploaded as it is (codes and
  // statistics), so neither the host nor the device ever holds the projections unquantised.
  void set_base(const BaseWeights& base) override {
    gpt_->model().set_base(base);
    backend_.synchronize();
  }
  void set_training(bool on) override { gpt_->model().set_training(on); }
  void begin_step(int64_t step, int stream) override { gpt_->model().set_dropout_step(step, stream); }
  size_t activation_bytes() const override { return gpt_->activation_bytes(); }

  PipelineStage* pipeline_stage() override { return stage_.get(); }
  void zero_grad() override { gpt_->zero_grad(); }
  void all_reduce_tied_grad(comm::ProcessGroup& group) override { gpt_->all_reduce_wte_grad(group); }

  std::vector<DeviceMemory> memory() const override {
    size_t free_b = 0, total = 0;
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) return {};
    DeviceMemory m;
    m.device = device_;
    m.used_bytes = total - free_b;
    m.total_bytes = total;
    return {m};
  }
  double peak_flops() const override { return peak_tflops_ * 1e12; }
  std::map<std::string, std::string> memory_report() const override {
    std::map<std::string, std::string> out = {{"device", std::to_string(device_)},
                                              {"predicted_bytes", std::to_string(predicted_)},
                                              {"planner_bytes", std::to_string(planned_)},
                                              {"measured_bytes", std::to_string(measured_)},
                                              {"parameter_bytes", std::to_string(gpt_->parameter_bytes())},
                                              {"optimizer_bytes", std::to_string(gpt_->optimizer_bytes())},
                                              {"activation_bytes", std::to_string(gpt_->activation_bytes())},
                                              {"peak_tflops", std::to_string(peak_tflops_)}};
    // QLoRA: the part of parameter_bytes that is the 4-bit projections (codes and statistics).
    if (gpt_->model().nf4_base()) out["nf4_base_bytes"] = std::to_string(gpt_->model().base_quant_bytes());
    return out;
  }

 private:
  CudaBackend& backend_;
  bool bf16_;
  bool tensor_parallel_ = false;
  bool zero2_ = false;  // parallel.zero = 2: GpuTrainer reduces the gradients itself
  OptimizerShard shard_;
  int device_ = 0;
  double peak_tflops_ = 0;
  size_t predicted_ = 0, measured_ = 0, planned_ = 0;
  void allocate_packed() {
    if (!packed_)
      check_cuda(cudaMalloc(&packed_, packed_grad_count(buckets_) * sizeof(float)),
                 "cudaMalloc (packed fp32 gradient buckets for the data-parallel all-reduce)");
  }

  // The bucket finished by the backward at `layer`: packs it on the compute stream and submits
  // its all-reduce (the NCCL stream waits for the packing through the submission event). An empty
  // bucket (LoRA's non-layer tensors: there are none) submits nothing.
  void reduce_bucket(int layer) {
    Context& c = gpt_->context();
    allocate_packed();
    const GradBucket& b = bucket(layer);
    if (b.count == 0) return;
    float* dst = packed_ + b.packed_offset;
    for (const GradSlice& sl : b.slices) {
      if (bf16_) {
        convert(c, dst, static_cast<const bf16*>(gpt_->grads()) + sl.offset, sl.count);
      } else {
        check_cuda(cudaMemcpyAsync(dst, static_cast<const float*>(gpt_->grads()) + sl.offset,
                                   sl.count * sizeof(float), cudaMemcpyDeviceToDevice, c.stream()),
                   "cudaMemcpyAsync (packing a gradient bucket)");
      }
      dst += sl.count;
    }
    works_.push_back(dp_->all_reduce_async(packed_ + b.packed_offset, b.count));
  }

  // After every bucket's sum is in device memory: grads = sum / dp, slice by slice.
  void unpack(float inv) {
    Context& c = gpt_->context();
    scale_values(c, packed_, packed_grad_count(buckets_), inv);
    for (const GradBucket& b : buckets_) {
      const float* src = packed_ + b.packed_offset;
      for (const GradSlice& sl : b.slices) {
        if (bf16_) {
          convert(c, static_cast<bf16*>(gpt_->grads()) + sl.offset, src, sl.count);
        } else {
          check_cuda(cudaMemcpyAsync(static_cast<float*>(gpt_->grads()) + sl.offset, src,
                                     sl.count * sizeof(float), cudaMemcpyDeviceToDevice, c.stream()),
                     "cudaMemcpyAsync (unpacking a gradient bucket)");
        }
        src += sl.count;
      }
    }
  }

  void discard_buckets() {
    for (auto& w : works_) w->wait();
    works_.clear();
    overlapped_ = false;
  }

  size_t reduced_buckets() const {
    size_t n = 0;
    for (const GradBucket& b : buckets_) n += b.count > 0 ? 1 : 0;
    return n;
  }

  const GradBucket& bucket(int layer) const {
    // buckets_ runs layer n_layer-1 .. 0, then -1.
    const size_t i = layer < 0 ? buckets_.size() - 1 : buckets_.size() - 2 - static_cast<size_t>(layer);
    return buckets_.at(i);
  }

  // GpuTrainer's stage API behind the PipelineRunner's interface (device boundary buffers).
  class Stage final : public PipelineStage {
   public:
    Stage(GpuTrainer& gpt, const ModelDims& dims, const ModelShard& shard)
        : gpt_(gpt), dims_(dims), shard_(shard) {}
    const ModelDims& dims() const override { return dims_; }
    const ModelShard& shard() const override { return shard_; }
    void set_activation_slots(int slots) override {
      if (slots > gpt_.activation_slots())
        throw Error(ExitCode::kInternal, "GpuTrainer has " + std::to_string(gpt_.activation_slots()) +
                                             " activation slots, the schedule needs " +
                                             std::to_string(slots));
    }
    float forward_stage(int slot, const int32_t* inputs, const float* stage_in, const int32_t* targets,
                        const int32_t* positions) override {
      return gpt_.forward_stage(slot, inputs, stage_in, targets, positions);
    }
    const float* stage_output(int slot) override { return gpt_.stage_output(slot); }
    void backward_stage(int slot, const float* dout, float loss_scale) override {
      gpt_.backward_stage(slot, dout, loss_scale);
    }
    const float* stage_input_grad() override { return gpt_.stage_input_grad(); }
    float* receive_buffer(bool grad) override { return gpt_.stage_recv_buffer(grad); }

   private:
    GpuTrainer& gpt_;
    ModelDims dims_;
    ModelShard shard_;
  };

  std::unique_ptr<GpuTrainer> gpt_;
  std::unique_ptr<Stage> stage_;  // pp > 1
  std::vector<GradBucket> buckets_;
  float* packed_ = nullptr;  // packed_grad_count(buckets_) floats: at start for dp > 1, else on first use
  comm::ProcessGroup* dp_ = nullptr;  // the DP group, known from the first average_grads
  std::vector<std::unique_ptr<comm::Work>> works_;
  int64_t micro_ = 0;          // micro-step of the current optimizer step (0-based)
  int64_t learned_accum_ = 0;  // forward_backward calls per step, as seen at the last average_grads
  bool overlapped_ = false;    // the latest backward submitted every bucket
};

}  // namespace

std::unique_ptr<DeviceModel> make_cuda_train_model(const RunConfig& cfg, const ModelDims& dims,
                                                   const OptimizerShard& shard, const ModelParallel& model) {
  return std::make_unique<CudaTrainModel>(cfg, dims, shard, model);
}

}  // namespace flotilla::cuda
