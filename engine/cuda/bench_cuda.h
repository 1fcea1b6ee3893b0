// `flotilla-worker bench --device cuda`: the GPU training benchmark (engine/cuda/bench_cuda.cpp).
#pragma once

#include <string>
#include <vector>

namespace flotilla::cuda {

// Runs the benchmark with the bench command's arguments; returns the exit status.
int cmd_bench_cuda(const std::vector<std::string>& args);

}  // namespace flotilla::cuda
