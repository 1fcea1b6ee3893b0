// GpuTrainer's private state, shared by gpu_trainer.cpp (construction, parameters, optimizer) and
// gpu_trainer_zero2.cpp (ZeRO-2's gradient shard). Internal header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/comm/process_group.h"
#include "engine/core/error.h"
#include "engine/cuda/context.h"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/gpu_trainer.h"
#include "engine/model/model.h"

namespace flotilla::cuda::detail {

// One cudaMalloc, carved in 256-byte aligned pieces; counts bytes when base is null.
class Arena {
 public:
  explicit Arena(size_t bytes = 0) {
    if (bytes > 0) check_cuda(cudaMalloc(&base_, bytes), "cudaMalloc (GpuTrainer arena)");
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
    if (used_ > cap_) throw Error(ExitCode::kInternal, "GpuTrainer: arena layout overflow");
    return reinterpret_cast<T*>(static_cast<char*>(base_) + at);
  }
  size_t used() const { return used_; }
  void* base() const { return base_; }

 private:
  void* base_ = nullptr;
  size_t cap_ = 0, used_ = 0;
};

}  // namespace flotilla::cuda::detail

namespace flotilla::cuda {

struct GpuTrainer::Impl {
  CudaBackend* be = nullptr;
  Context* ctx = nullptr;
  ModelDims d;
  ModelShard sh;  // this rank's shard (the whole model without TP or PP)
  int B = 0, T = 0;
  GpuTrainerOptions opt;
  std::unique_ptr<Model> model;
  size_t n = 0;  // parameters of this shard
  // The optimizer arena: fp32 master weights under bf16 (`padded` >= n values, for ZeRO-1's
  // in-place all-gather), AdamW m and v for [shard_begin, shard_begin + shard_count), ZeRO-2's
  // fp32 sum slots (bf16) and gradient shard, and under bf16 pipeline stages an fp32 copy of the
  // tied embedding's gradient for its sum between the first and the last stage.
  std::unique_ptr<detail::Arena> optim;
  float* master = nullptr;
  std::unique_ptr<AdamW> adamw;  // the one optimizer (engine/train/adamw.h), moments in the arena
  size_t shard_begin = 0, shard_count = 0, padded = 0;
  bool zero2 = false;
  float *comm = nullptr, *shard_grad = nullptr, *tied_f32 = nullptr;
  struct InFlight {
    int layer = -1;
    std::unique_ptr<comm::Work> work;
  } in_flight[2];
  GpuTrainer::BackwardHook hook;  // set_backward_hook

  size_t es() const { return opt.bf16 ? 2 : 4; }
  const ParamLayout& layout() const { return model->layout(); }
  size_t offset(int i) const { return model->param_offset(i); }
  size_t size(int i) const { return model->param_size(i); }
  // The model's hook: ZeRO-2's per-layer reduction, then the caller's.
  void on_layer_done(int layer);

  // gpu_trainer_zero2.cpp. After local layer l's backward: its staging slot to fp32, all-reduced
  // asynchronously; then the other slot (layer l+1) drained into the shard. backward_done drains
  // both; finish reduces the non-layer tensors.
  template <typename S>
  void zero2_layer_done(int l);
  void zero2_drain(int k);
  float* zero2_sum_slot(int k);  // where slot k's fp32 sum runs: comm (bf16), or the slot itself
  void zero2_backward_done();
  template <typename S>
  void zero2_finish();
  // Adds local layer l's slices (layer_grad_offset(i), one layer of tensor i) of `src`, or non-layer
  // tensor i's range [from, from + count), intersected with this rank's shard, into shard_grad.
  void add_layer_to_shard(const float* src, int l);
  void add_range_to_shard(const float* src, int i, size_t from, size_t count);
};

}  // namespace flotilla::cuda
