// Error checks for CUDA runtime, cuBLASLt and kernel launches (host code only).
//
// Non-obvious decision: every failure becomes a flotilla::Error, never exit() or a printed
// message; an out-of-memory from cudaMalloc becomes ExitCode::kOutOfMemory (the planner's
// budget was wrong or another process holds the GPU), everything else kInternal, and a kernel
// launch is checked with cudaGetLastError right after it, so the message names the kernel.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

namespace flotilla::cuda {

// Throws flotilla::Error naming `what` when `e` is not cudaSuccess.
void check_cuda(cudaError_t e, const char* what);
// Throws flotilla::Error naming `what` when `s` is not CUBLAS_STATUS_SUCCESS.
void check_cublas(cublasStatus_t s, const char* what);
// Checks the launch of the kernel named `what` (cudaGetLastError).
void check_launch(const char* what);

// Whether a CUDA device can be used by this process; otherwise *reason says why (driver missing,
// no device, ...). Never throws.
bool cuda_device_present(std::string* reason);

}  // namespace flotilla::cuda
