// One GPU per rank: which device `flotilla-worker launch` gives each local rank, and which one a
// rank process selects (DESIGN.md §2.4, docs/worker.md "GPU pinning").
//
// Non-obvious decision: the launcher does not narrow CUDA_VISIBLE_DEVICES per rank (as some
// launchers do); every rank keeps seeing all the node's GPUs and is told an ordinal in
// FLOTILLA_CUDA_DEVICE. NCCL's peer-to-peer and CUDA IPC paths need the peers' devices visible,
// and ordinals keep one numbering across the launcher, the ranks, logs and `probe`. Ordinals are
// CUDA's: with CUDA_VISIBLE_DEVICES set, ordinal i is its i-th entry.
#pragma once

#include <string>
#include <vector>

namespace flotilla {

// The variable a rank reads: the CUDA device ordinal it must cudaSetDevice before allocating.
inline constexpr const char* kCudaDeviceEnv = "FLOTILLA_CUDA_DEVICE";
// Test hook: the GPU count the launcher assumes instead of asking CUDA (no GPU needed).
inline constexpr const char* kTestGpuCountEnv = "FLOTILLA_TEST_GPU_COUNT";

// "0,2,3" -> {0, 2, 3}; "" -> {}. Throws Error(kUsage) naming `option` for anything but
// comma-separated non-negative integers, or a repeated GPU (two ranks cannot share one).
std::vector<int> parse_gpu_list(const std::string& text, const std::string& option);

// The ordinal of each local rank 0..nproc-1: gpus[l] when a --gpus list is given, else l.
// `visible` is how many GPUs CUDA shows this process; `note` says where that number came from
// (e.g. "CUDA_VISIBLE_DEVICES=0,1"), only for the messages. Throws Error(kConfig) when there are
// fewer GPUs than ranks or a listed ordinal does not exist, naming both numbers and what to do.
std::vector<int> assign_gpus(int nproc, int visible, const std::vector<int>& gpus, const std::string& note);

// The ordinal a rank process uses among `visible` GPUs: FLOTILLA_CUDA_DEVICE (env_value, null
// when unset) when set, else local_rank % visible (a rank started by hand or by torchrun).
// Throws Error(kConfig) naming the variable when its value is not an ordinal below `visible`.
int rank_cuda_device(const char* env_value, int local_rank, int visible);

// GPUs CUDA shows this process: FLOTILLA_TEST_GPU_COUNT when set, else cudaGetDeviceCount in a
// CUDA build, else 0. `why` (optional) gets a short note on where the number came from.
int visible_gpu_count(std::string* why);

// The run device of a worker command line, for `launch` to decide whether to pin GPUs: for
// `train`, run.device of its --config with its --set overrides applied; "" for other commands
// or an unreadable config (the ranks then report the config error themselves).
std::string worker_run_device(const std::vector<std::string>& worker_args);

}  // namespace flotilla
