// The one AdamW optimizer (PyTorch semantics) of every training path, and the one step policy
// (gradient clipping, skipped steps) both trainer branches apply.
//
// AdamW runs over parameter groups: contiguous ranges of a model's flat trainable-parameter vector,
// one per tensor of its layout, each with its weight-decay flag (param_groups). It holds the
// moments m and v for one flat range [begin, begin + count) of that vector (all of it, or a ZeRO
// shard) in a backend's memory, and a step calls the backend's adamw_update kernel group by group
// over the intersection with that range: fp32 parameters, or bf16 parameters with fp32 master
// weights (a GPU's mixed precision), with the gradients scaled as they are read. The host path
// (DataParallel, on the CPU backend), the GPU trainer (GpuTrainer, on the CUDA backend), the host
// reference model behind the device seam and `bench` all use this class, so the optimizer's
// arithmetic and its decay mask exist once (engine/cpu/adamw.h and engine/cuda/adamw.cu are its
// two kernels, bitwise the same operation order).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/backend/backend.h"
#include "engine/config/run_config.h"

namespace flotilla {

class Model;
class ParamLayout;

struct AdamWHyper {
  float lr = 0;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;  // decoupled: p -= lr * weight_decay * p, on decaying groups only
};

// The [optim] section's AdamW settings at learning rate `lr`.
AdamWHyper adamw_hyper(const OptimSection& o, double lr);

// A contiguous range of the flat parameter vector and whether weight decay applies to it.
struct ParamGroup {
  size_t offset = 0;
  size_t count = 0;
  bool decay = false;
};

// One group per tensor this model (or shard) holds of its trainable parameters (Model::layout(),
// local offsets; the LoRA adapters of a LoRA model), decay as the layout's table says.
std::vector<ParamGroup> param_groups(const Model& model);
// The same for a layout and its local tensor sizes (tensors in table order, back to back).
std::vector<ParamGroup> param_groups(const ParamLayout& layout, const std::vector<size_t>& sizes);

class AdamW {
 public:
  // Moments for [begin, begin + count) of the vector `groups` covers, zero-initialised: allocated
  // in `backend`'s memory, or, when m and v are given, those buffers (count floats each, backend
  // memory the caller owns and keeps alive; zeroed here).
  AdamW(Backend& backend, std::vector<ParamGroup> groups, size_t begin, size_t count, float* m = nullptr,
        float* v = nullptr);
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // What one step updates, all in the backend's memory.
  struct Step {
    void* params = nullptr;       // the whole local vector: fp32, or bf16 when master is set
    float* master = nullptr;      // fp32 master weights of the whole vector (bf16 params), else null
    const void* grads = nullptr;  // parameter i's gradient at grads[i - grad_begin]
    size_t grad_begin = 0;
    DType grad_type = DType::kF32;
    float grad_scale = 1.0f;     // clipping: gradients are multiplied by this as they are read
    uint32_t rounding_seed = 0;  // bf16 params: 0 = round to nearest even, else stochastic
  };
  // One step t >= 1 (the bias corrections' exponent) over this object's range, group by group.
  void step(const Step& s, const AdamWHyper& h, int64_t t);
  // The plain fp32 case: params (whole vector) and grads (whole vector), no scaling.
  void step(float* params, const float* grads, const AdamWHyper& h, int64_t t);

  size_t begin() const { return begin_; }
  size_t size() const { return count_; }
  const std::vector<ParamGroup>& groups() const { return groups_; }
  float* m() { return m_; }  // count floats, backend memory
  float* v() { return v_; }
  const float* m() const { return m_; }
  const float* v() const { return v_; }
  // Host copies in and out (checkpoints, the device mirror).
  void set_moments(const float* m, const float* v);
  void get_moments(float* m, float* v) const;

 private:
  Backend& backend_;
  std::vector<ParamGroup> groups_;
  size_t begin_ = 0, count_ = 0;
  BackendBuffer own_m_, own_v_;
  float* m_ = nullptr;
  float* v_ = nullptr;
};

// sqrt(sum g^2), accumulated in double in fixed blocks: identical for any thread count (host memory).
float global_grad_norm(const float* g, size_t n);

// g *= s (host memory).
void scale_grads(float* g, size_t n, float s);

// What the step policy decides after the gradient norm is known, the same on every path and rank:
// the factor the gradients are scaled by (clipping to train.grad_clip when the norm exceeds it),
// and whether the update is skipped (a non-finite loss or norm, or a loss above
// train.spike_factor x the running mean loss_ema), with the reason for the run's log.
struct StepDecision {
  float grad_scale = 1.0f;
  bool skip = false;
  std::string why;  // "step 12: skipped the update (loss nan, grad norm 3.2)" when skipped
};
StepDecision decide_step(const TrainSection& train, int64_t step, float loss, float grad_norm,
                         double loss_ema);
// The running mean of the loss the spike guard compares against, after an applied step.
double next_loss_ema(double loss_ema, float loss);

}  // namespace flotilla
