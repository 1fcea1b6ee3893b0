// SwiGLU kernels: elementwise over (N, F), reading the gate and up halves of each row. The sigmoid
// uses expf (not __expf) to match the CPU twin and PyTorch's silu closely.
#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/swiglu.h"

namespace flotilla::cuda {
namespace {

template <typename T>
__global__ void swiglu_forward_kernel(T* out, const T* inp, size_t total, int F) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; idx < total; idx += stride) {
    const size_t r = idx / F, j = idx % F;
    const float g = to_f(inp[r * 2 * F + j]), u = to_f(inp[r * 2 * F + F + j]);
    out[idx] = from_f<T>(g / (1.0f + expf(-g)) * u);
  }
}

template <typename T>
__global__ void swiglu_backward_kernel(T* dinp, const T* dout, const T* inp, size_t total, int F) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; idx < total; idx += stride) {
    const size_t r = idx / F, j = idx % F;
    const float g = to_f(inp[r * 2 * F + j]), u = to_f(inp[r * 2 * F + F + j]), d = to_f(dout[idx]);
    const float sig = 1.0f / (1.0f + expf(-g));
    dinp[r * 2 * F + j] = from_f<T>(d * u * sig * (1.0f + g * (1.0f - sig)));
    dinp[r * 2 * F + F + j] = from_f<T>(d * g * sig);
  }
}

}  // namespace

template <typename T>
void swiglu_forward(Context& ctx, T* out, const T* inp, long N, int F) {
  const size_t total = static_cast<size_t>(N) * F;
  if (total == 0) return;
  swiglu_forward_kernel<T><<<grid_for(total, 256), 256, 0, ctx.stream()>>>(out, inp, total, F);
  check_launch("swiglu_forward");
}

template <typename T>
void swiglu_backward(Context& ctx, T* dinp, const T* dout, const T* inp, long N, int F) {
  const size_t total = static_cast<size_t>(N) * F;
  if (total == 0) return;
  swiglu_backward_kernel<T><<<grid_for(total, 256), 256, 0, ctx.stream()>>>(dinp, dout, inp, total, F);
  check_launch("swiglu_backward");
}

template void swiglu_forward<float>(Context&, float*, const float*, long, int);
template void swiglu_forward<bf16>(Context&, bf16*, const bf16*, long, int);
template void swiglu_backward<float>(Context&, float*, const float*, const float*, long, int);
template void swiglu_backward<bf16>(Context&, bf16*, const bf16*, const bf16*, long, int);

}  // namespace flotilla::cuda
