// Two-pass deterministic reductions (llm.c's global_sum_deterministic idea). Non-obvious decision:
// the first pass uses a grid whose size depends only on n (never on the SM count), each thread
// walking a fixed strided set of elements and each block reducing in a fixed tree into one
// double; the second pass is one block summing the partials in a fixed tree, so the result is
// the same bits on every run and every GPU, with no atomics.
#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/global_norm.h"

namespace flotilla::cuda {
namespace {

constexpr int kThreads = 256;
constexpr unsigned kMaxBlocks = 1024;

template <typename T, bool kSquare>
__global__ void partial_sum_kernel(double* partial, const T* x, size_t n) {
  __shared__ double shared[32];
  double acc = 0.0;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    const double v = static_cast<double>(to_f(x[i]));
    acc += kSquare ? v * v : v;
  }
  const double s = block_sum(acc, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void final_sum_kernel(double* out, const double* partial, unsigned count) {
  __shared__ double shared[32];
  const double v = threadIdx.x < count ? partial[threadIdx.x] : 0.0;
  const double s = block_sum(v, shared);
  if (threadIdx.x == 0) *out = s;
}

template <typename T, bool kSquare>
double reduce(Context& ctx, const T* x, size_t n) {
  if (n == 0) return 0.0;
  size_t blocks = (n + 4 * kThreads - 1) / (4 * kThreads);
  const unsigned grid = static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
  auto* partial = static_cast<double*>(ctx.scratch((kMaxBlocks + 1) * sizeof(double)));
  partial_sum_kernel<T, kSquare><<<grid, kThreads, 0, ctx.stream()>>>(partial, x, n);
  check_launch("global reduction (partials)");
  final_sum_kernel<<<1, kMaxBlocks, 0, ctx.stream()>>>(partial + kMaxBlocks, partial, grid);
  check_launch("global reduction (final)");
  double result = 0.0;
  check_cuda(cudaMemcpyAsync(&result, partial + kMaxBlocks, sizeof(double), cudaMemcpyDeviceToHost, ctx.stream()),
             "cudaMemcpyAsync (reduction result)");
  ctx.synchronize();
  return result;
}

}  // namespace

template <typename T>
double sum_squares(Context& ctx, const T* g, size_t n) {
  return reduce<T, true>(ctx, g, n);
}

double sum_values(Context& ctx, const float* x, size_t n) { return reduce<float, false>(ctx, x, n); }

template double sum_squares<float>(Context&, const float*, size_t);
template double sum_squares<bf16>(Context&, const bf16*, size_t);

}  // namespace flotilla::cuda
