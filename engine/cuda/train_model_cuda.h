// `train` with run.device = "cuda": the trainer's DeviceModel (engine/train/device_model.h) over
// GpuTrainer. Plain C++ header (no CUDA include) so engine/train can create it, and so the gradient
// bucket plan below is unit-tested without CUDA (tests/engine/test_nccl_buckets.cpp).
//
// Non-obvious decision: the llm.c parameter layout stores each tensor for all layers together, so
// one layer's gradients are 12 strided slices, not a range. For the data-parallel all-reduce the
// slices of one bucket are packed into a contiguous range of an fp32 buffer (converting bf16 on
// the way), in the order the backward finishes them, and unpacked after the sum.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "engine/config/run_config.h"
#include "engine/model/gpt.h"
#include "engine/model/param_layout.h"
#include "engine/train/device_model.h"

namespace flotilla::cuda {

// Binds the pinned GPU (FLOTILLA_CUDA_DEVICE, else LOCAL_RANK mod count) through the registry's
// CudaBackend, measures the GEMM peak for train.dtype, then allocates GpuTrainer for
// train.micro_batch x train.seq_len and records the predicted and measured memory. With a shard
// (parallel.zero = 1, dp > 1) the AdamW moments are allocated for the shard only.
// With a model shard (parallel.tp or parallel.pp > 1) GpuTrainer holds this rank's part of the model
// and sums activations over model.tp, the gradient norm over model.tp and model.pp (NCCL groups);
// a pipeline stage allocates one activation set per micro-batch its schedule keeps in flight.
std::unique_ptr<DeviceModel> make_cuda_train_model(const RunConfig& cfg, const ModelDims& dims,
                                                   const OptimizerShard& shard = {},
                                                   const ModelParallel& model = {});

// A range of the llm.c-layout gradient buffer (elements).
struct GradSlice {
  size_t offset = 0, count = 0;
};

// One all-reduce of the overlapped data-parallel gradient sum.
struct GradBucket {
  int layer = -1;            // GpuTrainer::BackwardHook's layer; -1: wte, wpe, lnfw, lnfb
  size_t packed_offset = 0;  // start in the packed fp32 buffer (a multiple of kBucketAlign)
  size_t count = 0;          // elements (sum of the slices)
  std::vector<GradSlice> slices;
};

constexpr size_t kBucketAlign = 64;  // elements: 256-byte aligned bucket starts for NCCL

// The buckets in the order the model's backward completes them: layer n_layer-1 .. 0, then -1 (the
// non-layer tensors), for a parameter vector of `layout`'s tensors with these (local) sizes over
// n_layer layers. Together the slices cover every parameter exactly once.
inline std::vector<GradBucket> grad_buckets(const ParamLayout& layout, const std::vector<size_t>& sizes,
                                            int n_layer) {
  std::vector<size_t> offsets(sizes.size());
  size_t off = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    offsets[i] = off;
    off += sizes[i];
  }
  const size_t L = static_cast<size_t>(n_layer);
  std::vector<GradBucket> out;
  size_t packed = 0;
  auto finish = [&](GradBucket& b) {
    for (const GradSlice& s : b.slices) b.count += s.count;
    b.packed_offset = packed;
    packed += (b.count + kBucketAlign - 1) / kBucketAlign * kBucketAlign;
    out.push_back(std::move(b));
  };
  for (size_t l = L; l-- > 0;) {
    GradBucket b;
    b.layer = static_cast<int>(l);
    for (int i = 0; i < layout.size(); ++i) {
      if (!layout[i].per_layer() || sizes[static_cast<size_t>(i)] == 0) continue;
      const size_t per = sizes[static_cast<size_t>(i)] / L;
      b.slices.push_back({offsets[static_cast<size_t>(i)] + l * per, per});
    }
    finish(b);
  }
  GradBucket last;
  for (int i = 0; i < layout.size(); ++i)
    if (!layout[i].per_layer() && sizes[static_cast<size_t>(i)] > 0)
      last.slices.push_back({offsets[static_cast<size_t>(i)], sizes[static_cast<size_t>(i)]});
  finish(last);
  return out;
}

// GPT-2 (the tensors of gpt.h's ParamIndex).
inline std::vector<GradBucket> grad_buckets(const std::vector<size_t>& sizes, int n_layer) {
  return grad_buckets(ParamLayout(ModelDims{}), sizes, n_layer);
}

inline std::vector<GradBucket> grad_buckets(const ModelDims& dims) {
  return grad_buckets(ParamLayout(dims), param_sizes(dims), dims.n_layer);
}

// Elements of the packed buffer the buckets need (their aligned sizes added up).
inline size_t packed_grad_count(const std::vector<GradBucket>& buckets) {
  if (buckets.empty()) return 0;
  const GradBucket& b = buckets.back();
  return b.packed_offset + (b.count + kBucketAlign - 1) / kBucketAlign * kBucketAlign;
}

}  // namespace flotilla::cuda
