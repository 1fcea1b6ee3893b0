// CUDA error checks: errors become flotilla::Error with the failing call named.
#include "engine/cuda/cuda_check.h"

#include "engine/core/error.h"

namespace flotilla::cuda {

void check_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clear a sticky-free error so the next call is not blamed for it
  const ExitCode code = e == cudaErrorMemoryAllocation ? ExitCode::kOutOfMemory : ExitCode::kInternal;
  std::string hint = e == cudaErrorMemoryAllocation
                         ? "; lower train.micro_batch or train.seq_len, or free the GPU"
                         : "; rerun with CUDA_LAUNCH_BLOCKING=1 to locate it";
  throw Error(code, std::string("CUDA: ") + what + " failed: " + cudaGetErrorName(e) + " (" +
                        cudaGetErrorString(e) + ")" + hint);
}

void check_cublas(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  const ExitCode code = s == CUBLAS_STATUS_ALLOC_FAILED ? ExitCode::kOutOfMemory : ExitCode::kInternal;
  throw Error(code, std::string("cuBLASLt: ") + what + " failed with status " +
                        std::to_string(static_cast<int>(s)) + " (" + cublasLtGetStatusName(s) + ")");
}

void check_launch(const char* what) { check_cuda(cudaGetLastError(), what); }

bool cuda_device_present(std::string* reason) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (reason) *reason = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    return false;
  }
  if (count < 1) {
    if (reason) *reason = "cudaGetDeviceCount reports 0 devices";
    return false;
  }
  if (reason) reason->clear();
  return true;
}

}  // namespace flotilla::cuda
