// Context: the stream, cuBLASLt handle and scratch of the CUDA backend.
#include "engine/cuda/context.h"

#include "engine/cuda/cuda_check.h"

namespace flotilla::cuda {

Context::Context() {
  check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  check_cublas(cublasLtCreate(&lt_), "cublasLtCreate");
  check_cuda(cudaMalloc(&lt_workspace_, kLtWorkspaceBytes), "cudaMalloc (cuBLASLt workspace, 32 MiB)");
}

Context::~Context() {
  if (stream_) cudaStreamSynchronize(stream_);
  if (scratch_) cudaFree(scratch_);
  if (lt_workspace_) cudaFree(lt_workspace_);
  if (lt_) cublasLtDestroy(lt_);
  if (stream_) cudaStreamDestroy(stream_);
}

void* Context::scratch(size_t bytes) {
  if (bytes <= scratch_bytes_) return scratch_;
  size_t grow = scratch_bytes_ * 2;
  if (grow < bytes) grow = bytes;
  grow = (grow + 255) / 256 * 256;
  check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize (scratch growth)");
  if (scratch_) check_cuda(cudaFree(scratch_), "cudaFree (scratch)");
  scratch_ = nullptr;
  scratch_bytes_ = 0;
  check_cuda(cudaMalloc(&scratch_, grow), "cudaMalloc (scratch)");
  scratch_bytes_ = grow;
  return scratch_;
}

void Context::synchronize() { check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

}  // namespace flotilla::cuda
