// The trainer's CUDA model: CudaGpt behind the DeviceModel seam (engine/train/device_model.h).
//
// Non-obvious decisions:
// - Data-parallel gradients are averaged by ONE all-reduce of CudaGpt's contiguous gradient buffer
//   after the last micro-step's backward, through the DP ProcessGroup (NCCL). The group runs it on
//   its own stream, fenced by an event recorded on the compute stream at submission
//   (ProcessGroup::set_device_stream), and the call returns once the sum is in device memory; the
//   1/dp scaling then runs on the compute stream. There is no per-layer overlap with the backward
//   yet. The ProcessGroup has no bf16 type, so bf16 gradients are widened into an fp32 buffer,
//   summed in fp32 and rounded back once.
// - The GEMM peak for MFU is measured before the model is allocated, so the cudaMemGetInfo delta
//   around the allocation is the model's alone (the planner's prediction is checked against it).
#include "engine/cuda/train_model_cuda.h"

#include <string>

#include "engine/backend/registry.h"
#include "engine/core/error.h"
#include "engine/cuda/bench_cuda.h"
#include "engine/cuda/context.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/gpt_cuda.h"
#include "engine/cuda/residual.h"
#include "engine/parallel/process_group.h"

namespace flotilla::cuda {
namespace {

class CudaTrainModel final : public DeviceModel {
 public:
  CudaTrainModel(const RunConfig& cfg, const GptDims& dims)
      : backend_(dynamic_cast<CudaBackend&>(get_backend("cuda"))), bf16_(cfg.train.dtype == "bf16") {
    backend_.set_deterministic(cfg.train.deterministic);
    check_cuda(cudaGetDevice(&device_), "cudaGetDevice");
    peak_tflops_ = gemm_peak_tflops(backend_.context(), 8192, bf16_, 3);
    CudaGptOptions o;
    o.bf16 = bf16_;
    o.fuse_gelu = bf16_;  // fp32: the separate GELU kernel, the CPU model's sequence
    o.deterministic = cfg.train.deterministic;
    o.recompute = cfg.train.recompute;
    const int B = cfg.train.micro_batch, T = cfg.train.seq_len;
    predicted_ = CudaGpt::predicted_bytes(dims, B, T, bf16_);
    size_t free_before = 0, free_after = 0, total = 0;
    backend_.synchronize();
    check_cuda(cudaMemGetInfo(&free_before, &total), "cudaMemGetInfo");
    if (predicted_ > free_before)
      throw Error(ExitCode::kOutOfMemory,
                  "train.micro_batch " + std::to_string(B) + " x train.seq_len " + std::to_string(T) + " (" +
                      cfg.train.dtype + ") needs " + std::to_string(predicted_ >> 20) + " MiB on GPU " +
                      std::to_string(device_) + ", which has " + std::to_string(free_before >> 20) +
                      " MiB free: lower train.micro_batch (gradient accumulation keeps the global batch)");
    gpt_ = std::make_unique<CudaGpt>(backend_, dims, B, T, o);
    check_cuda(cudaMemGetInfo(&free_after, &total), "cudaMemGetInfo");
    measured_ = free_before > free_after ? free_before - free_after : 0;
  }
  ~CudaTrainModel() override {
    if (fp32_grads_) cudaFree(fp32_grads_);
  }
  CudaTrainModel(const CudaTrainModel&) = delete;
  CudaTrainModel& operator=(const CudaTrainModel&) = delete;

  std::string describe() const override { return backend_.describe() + (bf16_ ? ", bf16" : ", fp32"); }
  void set_params(const float* host) override { gpt_->set_params(host); }
  void get_params(float* host) override { gpt_->get_params(host); }
  void set_moments(const float* m, const float* v) override { gpt_->set_moments(m, v); }
  void get_moments(float* m, float* v) override { gpt_->get_moments(m, v); }
  float forward_backward(const int32_t* inputs, const int32_t* targets, float loss_scale,
                         bool accumulate) override {
    return gpt_->forward_backward(inputs, targets, loss_scale, accumulate);
  }
  float forward(const int32_t* inputs, const int32_t* targets) override {
    return gpt_->forward(inputs, targets);
  }

  void average_grads(parallel::ProcessGroup& dp) override {
    if (dp.size() == 1) return;
    if (std::string(dp.backend()) != "nccl")
      throw_config("run.device = cuda with parallel.dp = " + std::to_string(dp.size()) +
                   " needs parallel.backend = \"nccl\" (or \"auto\"), not \"" + dp.backend() + "\"");
    Context& c = gpt_->context();
    const size_t n = gpt_->num_params();
    const float inv = 1.0f / static_cast<float>(dp.size());
    dp.set_device_stream(c.stream());
    if (!bf16_) {
      auto* g = static_cast<float*>(gpt_->grads());
      dp.all_reduce(g, n);
      scale_values(c, g, n, inv);
      return;
    }
    if (!fp32_grads_)
      check_cuda(cudaMalloc(&fp32_grads_, n * sizeof(float)), "cudaMalloc (fp32 gradient sum)");
    auto* g = static_cast<bf16*>(gpt_->grads());
    convert(c, fp32_grads_, g, n);
    dp.all_reduce(fp32_grads_, n);
    scale_values(c, fp32_grads_, n, inv);
    convert(c, g, fp32_grads_, n);
  }

  float grad_norm() override { return gpt_->grad_norm(); }
  void update(const AdamHyper& h, float grad_scale, int64_t t) override {
    AdamWHyper a;
    a.beta1 = h.beta1;
    a.beta2 = h.beta2;
    a.eps = h.eps;
    a.weight_decay = h.weight_decay;
    gpt_->update(h.lr, a, grad_scale, t);
  }
  size_t activation_bytes() const override { return gpt_->activation_bytes(); }

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
    return {{"device", std::to_string(device_)},
            {"predicted_bytes", std::to_string(predicted_)},
            {"measured_bytes", std::to_string(measured_)},
            {"parameter_bytes", std::to_string(gpt_->parameter_bytes())},
            {"optimizer_bytes", std::to_string(gpt_->optimizer_bytes())},
            {"activation_bytes", std::to_string(gpt_->activation_bytes())},
            {"peak_tflops", std::to_string(peak_tflops_)}};
  }

 private:
  CudaBackend& backend_;
  bool bf16_;
  int device_ = 0;
  double peak_tflops_ = 0;
  size_t predicted_ = 0, measured_ = 0;
  std::unique_ptr<CudaGpt> gpt_;
  float* fp32_grads_ = nullptr;
};

}  // namespace

std::unique_ptr<DeviceModel> make_cuda_train_model(const RunConfig& cfg, const GptDims& dims) {
  return std::make_unique<CudaTrainModel>(cfg, dims);
}

}  // namespace flotilla::cuda
