// The device side of a training step on one GPU: a flotilla::Model on the CUDA backend (the
// architecture's own forward and backward, engine/model/*_pass.cpp, in fp32 or bf16 storage) plus
// what lives only on the device: fp32 master weights under bf16, the AdamW moments (all of them,
// or this rank's ZeRO shard), and ZeRO-2's gradient shard fed from the model's staging slots. Used
// by the trainer's DeviceModel (train_model_cuda.cpp), `bench --device cuda` and the GPU tests.
//
// Non-obvious decision: the model's step is not written here. GpuTrainer used to replay Model's
// kernel sequence for GPT-2 on device arenas; now the one Model runs it on the CUDA backend, and
// this class keeps only the optimizer and the device memory plan, which do not depend on the
// architecture (they read the model's parameter layout). The GPU tests still compare it step by
// step with the CPU model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/model/gpt.h"
#include "engine/model/model.h"
#include "engine/model/param_layout.h"
#include "engine/train/adamw.h"

namespace flotilla::comm {
class ProcessGroup;
}

namespace flotilla::cuda {

class CudaBackend;
class Context;

struct GpuTrainerOptions {
  bool bf16 = false;                 // bf16 parameters, gradients and activations
  bool fuse_gelu = true;             // GPT-2: GELU in the cuBLASLt epilogue of the MLP-up matmul
  uint32_t stochastic_rounding = 0;  // bf16 AdamW write-back: 0 = round to nearest, else a seed
  bool deterministic = true;         // train.deterministic: cuBLASLt without split-K (Context)
  // train.recompute: keep only each block's input (the residual stream) and rebuild the block's
  // activations, in one shared slot, just before its backward. Bitwise the same training.
  bool recompute = false;
  // ZeRO-1 (parallel.zero = 1): AdamW m and v exist only for the flat range [shard_begin,
  // shard_begin + shard_count), and update() writes only that range (shard_count = 0: every
  // parameter). The fp32 vector update() writes (updated_params()) has room for padded_params
  // values (>= the parameter count), so the caller's in-place all-gather can fill it.
  size_t shard_begin = 0, shard_count = 0, padded_params = 0;
  // Tensor parallelism (parallel.tp > 1): this rank's part of the model in Model's shard layout
  // (engine/model/param_layout.h: column/row-parallel matmuls, vocab-parallel wte; pp must be 1), and
  // the TP group (NCCL) that all-reduces device activations: the row-parallel outputs in the
  // forward (g), d(LayerNorm output) in the backward (f), the embedding, and the cross-entropy's
  // per-row statistics. The default shard is the whole model.
  ModelShard shard;
  comm::ProcessGroup* tp = nullptr;
  // Pipeline parallelism (shard.pp > 1): activation sets kept at once (pipeline_slots of the
  // schedule), and the PP group, over which the gradient norm is summed.
  int slots = 1;
  comm::ProcessGroup* pp = nullptr;
  // ZeRO-2 (parallel.zero = 2; needs the shard above): the DP group. No full gradient buffer
  // exists: each layer's gradients go to one of two staging slots, are all-reduced (in fp32) while
  // the next layer's backward runs, and this rank adds its shard's part to an fp32 gradient shard;
  // wte, wpe and the final LayerNorm accumulate locally and are reduced by finish_gradients().
  comm::ProcessGroup* zero2 = nullptr;
  // LoRA (engine/model/lora.h): the base is frozen in the storage dtype (set it through
  // model().set_base_from_full, or model().set_base) and everything above that says "parameters"
  // means the adapters. QLoRA (lora.nf4): the projections are held as NF4 codes and statistics
  // only (model().set_base takes the host's quantised BaseWeights; no fp32 or bf16 copy exists).
  LoraSpec lora;
  // The fused LM head (ModelOptions::logits_chunk_rows): rows of logits per chunk; 0 = all B*T.
  int logits_chunk_rows = 0;
};

class GpuTrainer {
 public:
  // Allocates everything for micro-batch B x T up front (throws kOutOfMemory when it does not fit).
  GpuTrainer(CudaBackend& backend, const ModelDims& dims, int B, int T, const GpuTrainerOptions& options);
  ~GpuTrainer();
  GpuTrainer(const GpuTrainer&) = delete;
  GpuTrainer& operator=(const GpuTrainer&) = delete;

  // Bytes the model and the optimizer state need for (dims, B, T, bf16): the memory prediction
  // checked against cudaMemGetInfo before allocating.
  static size_t predicted_bytes(const ModelDims& dims, int B, int T, bool use_bf16, bool recompute = false,
                                size_t shard_count = 0, size_t padded_params = 0,
                                const ModelShard& shard = {}, int slots = 1, bool zero2 = false,
                                const LoraSpec& lora = {}, int logits_chunk_rows = 0);

  // Host fp32 parameters in / out (master weights): the full layout (num_parameters(dims) floats),
  // or this rank's shard of it (full_to_shard's layout, num_params() floats) under TP or PP.
  void set_params(const float* host);
  void get_params(float* host) const;

  // zero_grad + forward + backward on host token ids (B*T each); returns the mean loss.
  float forward_backward(const int32_t* inputs, const int32_t* targets);
  // Gradient accumulation: dloss = loss_scale / counted targets per target (Model::backward), and
  // with `accumulate` the gradients are added to instead of zeroed first. positions: Model's.
  float forward_backward(const int32_t* inputs, const int32_t* targets, float loss_scale, bool accumulate,
                         const int32_t* positions = nullptr);
  // Forward and mean loss only (evaluation): gradients are left as they are.
  float forward(const int32_t* inputs, const int32_t* targets, const int32_t* positions = nullptr);
  // Global gradient norm (deterministic; under TP over every rank's shard, replicated tensors
  // counted once), then clipping to `clip` (0: none) and one AdamW step t at h.lr.
  float step(const AdamWHyper& h, float clip, int64_t t);
  // The two halves of step(): the deterministic global norm of the gradient buffer, and one
  // AdamW step t >= 1 with the gradients multiplied by `scale` (clipping) as they are used.
  float grad_norm();
  void update(const AdamWHyper& h, float scale, int64_t t);

  // The fp32 vector update() writes: the master weights (bf16) or the parameters (fp32), with
  // padded_params values. After the ZeRO all-gather into it, params_from_master() re-rounds the
  // bf16 working copy from the master weights (fp32: nothing to do).
  float* updated_params();
  void params_from_master();
  // Host fp32 AdamW moments (num_params() floats each, or shard_count under ZeRO), for checkpoints
  // and exact resume. The step count t is the caller's (update's argument), as in the CPU optimizer.
  void set_moments(const float* m, const float* v);
  void get_moments(float* m, float* v) const;

  // Pipeline stages (options.shard.pp > 1), Model's stage API on the device: the forward of one
  // micro-batch in `slot` (token ids on the host; stage_in: the previous stage's output, fp32
  // (B*T, C) on the device, for non-first stages) returns the mean loss on the last stage, else -1;
  // stage_output(slot) is the (B*T, C) fp32 device output of a non-last stage. backward_stage
  // accumulates gradients (dout: d(stage output), fp32 on the device, for non-last stages; call
  // zero_grad() first); then stage_input_grad() holds d(stage input) of that slot (non-first
  // stages). stage_recv_buffer(false / true) are device buffers to receive stage_in / dout into.
  void zero_grad();
  float forward_stage(int slot, const int32_t* inputs, const float* stage_in, const int32_t* targets,
                      const int32_t* positions = nullptr);
  const float* stage_output(int slot);
  void backward_stage(int slot, const float* dout, float loss_scale);
  const float* stage_input_grad();
  float* stage_recv_buffer(bool grad);
  int activation_slots() const;
  // Sums the tied embedding's gradient over `group` in place (the first and the last stage;
  // bf16 gradients are summed in fp32).
  void all_reduce_wte_grad(comm::ProcessGroup& group);
  // ZeRO-2: after a step's last backward (and the tied wte sum), the DP average of the
  // non-layer tensors' gradients into this rank's gradient shard; the layers' were averaged during
  // the backwards. grad_norm() and update() then read the shard.
  void finish_gradients();

  // Called during the backward of forward_backward, in the caller's thread, right after the
  // kernels that finish a group of gradients are queued on context().stream(): layer =
  // n_layer-1 .. 0 (that layer's slices of the per-layer tensors), then -1 (the non-layer
  // tensors, final after the embedding's backward). Lets the trainer start the data-parallel all-reduce of
  // layer l while layer l-1's backward runs. Empty (the default): no calls.
  using BackwardHook = std::function<void(int layer)>;
  void set_backward_hook(BackwardHook hook);

  // The contiguous device gradient buffer: num_params() values of float, or of bf16 when
  // bf16_storage(); ordered on context().stream() (e.g. for an NCCL all-reduce).
  void* grads();
  size_t num_params() const;
  bool bf16_storage() const;
  Context& context();

  // Parameters (LoRA: adapters and the frozen base; QLoRA's projections as their NF4 bytes) and
  // gradients.
  size_t parameter_bytes() const;
  size_t optimizer_bytes() const;
  size_t activation_bytes() const;
  Model& model();  // the architecture's model on the CUDA backend

  struct Impl;  // gpu_trainer_impl.h

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace flotilla::cuda
