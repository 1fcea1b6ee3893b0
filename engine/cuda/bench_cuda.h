// `flotilla-worker bench --device cuda`: the GPU training benchmark (engine/cuda/bench_cuda.cpp).
#pragma once

#include <string>
#include <vector>

namespace flotilla::cuda {

class Context;

// Best TFLOP/s of an n^3 cuBLASLt GEMM in bf16 (else fp32) over `reps` timed calls (CUDA events);
// allocates 3 n^2 elements for the duration of the call. Also `train`'s MFU peak.
double gemm_peak_tflops(Context& ctx, int n, bool bf16_type, int reps);

// The n of the peak GEMM: 8192 on a GPU; 256 under the CPU simulator (FLOTILLA_CUDA=SIM), where an
// 8192^3 product would take a minute and its figure means nothing anyway.
#ifdef FLOTILLA_CUDA_SIM
constexpr int kPeakGemmN = 256;
#else
constexpr int kPeakGemmN = 8192;
#endif

// Runs the benchmark with the bench command's arguments; returns the exit status.
int cmd_bench_cuda(const std::vector<std::string>& args);

}  // namespace flotilla::cuda
