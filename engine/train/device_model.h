// The trainer's seam to a model that keeps its parameters, gradients and optimizer state off the
// host (run.device = "cuda": engine/cuda/train_model_cuda.cpp over GpuTrainer).
//
// Non-obvious decision: the trainer keeps its host Model and DataParallel moments as the
// *host mirror* of a device run. Initialisation (init_random / model.init_from) happens there, so a
// device run starts from bit-identical parameters; before a checkpoint, a sample or the end of a
// run the device state is copied back into the mirror (get_params / get_moments), and after a
// resume it is copied out (set_params / set_moments). Checkpoints, export, sample and resume
// therefore see the CPU format unchanged and work across devices. The CPU path itself does not go
// through this interface (it keeps DataParallel's overlap, ZeRO, TP and PP); the host reference
// implementation (make_host_reference_model, selected with FLOTILLA_TEST_DEVICE_MODEL=host) runs
// the same seam on the CPU so the trainer's device branch is tested bit for bit against the CPU
// path on machines without a GPU (tests/engine/test_train_device_seam.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/config/config_validate.h"
#include "engine/config/run_config.h"
#include "engine/model/gpt.h"
#include "engine/model/param_layout.h"
#include "engine/parallel/data_parallel.h"

namespace flotilla {

namespace comm {
class ProcessGroup;
}
class PipelineStage;  // engine/parallel/pipeline.h
struct BaseWeights;   // engine/model/base_weights.h

// One GPU's memory for the metrics `gpus` array (ui/live/livedata.cpp reads these names).
struct DeviceMemory {
  int device = 0;
  uint64_t used_bytes = 0;  // total - free (cudaMemGetInfo): the whole device, every process
  uint64_t total_bytes = 0;
};

// ZeRO-1 on a device: this rank's AdamW shard [begin, begin + count) of the flat parameter vector
// (DataParallel's state_begin/state_size; every rank's count is `count`, the last one padded), and
// the DP group that all-gathers the updated shards. group == nullptr: no sharding.
struct OptimizerShard {
  comm::ProcessGroup* group = nullptr;
  size_t begin = 0, count = 0;
};

// Tensor and pipeline parallelism on a device: this rank's part of the model (Model's shard
// layout) and the groups its activations and gradient norm are summed over. Default: the whole
// model.
struct ModelParallel {
  ModelShard shard;
  comm::ProcessGroup* tp = nullptr;
  comm::ProcessGroup* pp = nullptr;
};

class DeviceModel {
 public:
  virtual ~DeviceModel() = default;

  virtual std::string describe() const = 0;  // "cuda device 0: ..., bf16"

  // This rank's fp32 parameters (master weights under bf16): the full llm.c layout, or under
  // tensor parallelism its shard (Model's local layout, engine/model/param_layout.h).
  virtual void set_params(const float* host) = 0;
  virtual void get_params(float* host) = 0;
  // AdamW first and second moments: all parameters, or this rank's OptimizerShard.
  virtual void set_moments(const float* m, const float* v) = 0;
  virtual void get_moments(float* m, float* v) = 0;

  // Forward + backward of one micro-batch (host token ids and document positions or null, B*T
  // each); returns its mean loss. dloss = loss_scale / counted targets per target
  // (Model::backward); accumulate = false zeroes the gradients first.
  virtual float forward_backward(const int32_t* inputs, const int32_t* targets, float loss_scale,
                                 bool accumulate, const int32_t* positions) = 0;
  // Forward and mean loss only (evaluation); gradients untouched.
  virtual float forward(const int32_t* inputs, const int32_t* targets, const int32_t* positions) = 0;
  // Gradients summed over `dp` then divided by its size (the trainer calls it when dp > 1; a
  // one-rank NCCL group is allowed, for the GPU test of the bucket path).
  virtual void average_grads(comm::ProcessGroup& dp) = 0;
  // Deterministic global L2 norm of the gradients.
  virtual float grad_norm() = 0;
  // One AdamW step t >= 1 at h.lr, gradients multiplied by grad_scale (clipping; 1 = none). With
  // an OptimizerShard: this rank's range only, then an all-gather over its group (collective).
  virtual void update(const AdamWHyper& h, float grad_scale, int64_t t) = 0;

  // Pipeline parallelism (parallel.pp > 1): this rank's stage for the PipelineRunner (nullptr
  // without stages; its forward/backward replace forward_backward and forward), the gradient
  // zeroing before a step's schedule, and the sum of the tied wte gradient between the first and
  // the last stage.
  virtual PipelineStage* pipeline_stage() { return nullptr; }
  virtual void zero_grad() {}
  virtual void all_reduce_tied_grad(comm::ProcessGroup& group) {}

  // LoRA: the frozen base's fp32 parameters, the whole model's (ParamLayout(dims).full_params()
  // floats; the device keeps its shard in its storage dtype). set_params/get_params and the moments
  // above are then the adapters'. Evaluation and sampling forwards draw no dropout masks
  // (set_training(false)); begin_step keys the masks of the step's forwards (Model::set_dropout_step).
  virtual void set_base_params(const float* full) = 0;
  // QLoRA (lora.base_quant = "nf4"): the frozen base as the host holds it (base_weights.h; the
  // projections quantised, never in fp32); the device takes its shard's slice (Model::set_base).
  virtual void set_base(const BaseWeights& base);
  virtual void set_training(bool on) = 0;
  virtual void begin_step(int64_t step, int stream) = 0;

  virtual size_t activation_bytes() const = 0;
  // Per-GPU memory for the step records (empty: no GPU).
  virtual std::vector<DeviceMemory> memory() const { return {}; }
  // Peak FLOP/s for MFU measured at start (0: unknown).
  virtual double peak_flops() const { return 0; }
  // The start-up memory report: the planner's prediction next to the measured allocation.
  virtual std::map<std::string, std::string> memory_report() const { return {}; }
};

// What `train` cannot run on cfg.run.device yet (cuda: head sizes other than
// 32/64/128), each naming its key. Kept out of validate(): the planner, `plan`
// and the wizard validate multi-GPU layouts with it, which are valid configs for those.
std::vector<ConfigProblem> device_training_problems(const RunConfig& cfg);
// Throws Error(kConfig) listing device_training_problems(cfg), if any (run_training, first thing).
void refuse_unsupported_device_training(const RunConfig& cfg);

// The device model for cfg.run.device, or nullptr when the trainer's own CPU path runs it
// ("cpu", unless FLOTILLA_TEST_DEVICE_MODEL=host asks for the host reference). Throws
// Error(kConfig) for a device this build or machine does not have.
std::unique_ptr<DeviceModel> make_device_model(const RunConfig& cfg, const ModelDims& dims,
                                               const OptimizerShard& shard = {},
                                               const ModelParallel& model = {});

// The options of the trainer's host model for a config (the CPU path's model and a device run's
// host mirror): fp32 storage, LoRA from [lora].
ModelOptions host_model_options(const RunConfig& cfg);

// Model + AdamW on the CPU behind the seam: the reference the trainer's device branch is
// tested against (bitwise equal to the CPU path for dp = 1).
std::unique_ptr<DeviceModel> make_host_reference_model(const RunConfig& cfg, const ModelDims& dims);

}  // namespace flotilla
