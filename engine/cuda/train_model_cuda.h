// `train` with run.device = "cuda": the trainer's DeviceModel (engine/train/device_model.h) over
// CudaGpt. Plain C++ header (no CUDA include) so engine/train can create it.
#pragma once

#include <memory>

#include "engine/config/run_config.h"
#include "engine/model/gpt.h"
#include "engine/train/device_model.h"

namespace flotilla::cuda {

// Binds the pinned GPU (FLOTILLA_CUDA_DEVICE, else LOCAL_RANK mod count) through the registry's
// CudaBackend, measures the GEMM peak for train.dtype, then allocates CudaGpt for
// train.micro_batch x train.seq_len and records the predicted and measured memory.
std::unique_ptr<DeviceModel> make_cuda_train_model(const RunConfig& cfg, const GptDims& dims);

}  // namespace flotilla::cuda
