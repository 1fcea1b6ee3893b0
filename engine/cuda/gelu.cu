// GELU kernels. Non-obvious decision: one grid-stride kernel handles both the 16-byte packed path
// (4 floats / 8 bf16 per load, taken when n and every pointer allow it) and the scalar tail path,
// chosen on the host, so odd sizes and unaligned slices stay correct.
#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/gelu.h"

namespace flotilla::cuda {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

__device__ __forceinline__ float gelu_f(float x) {
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}

__device__ __forceinline__ float gelu_grad(float x) {
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  const float th = tanhf(u);
  const float sech2 = 1.0f - th * th;
  return 0.5f * (1.0f + th) + 0.5f * x * sech2 * kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
}

template <typename T, bool kPacked>
__global__ void gelu_forward_kernel(T* out, const T* inp, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  if constexpr (kPacked) {
    constexpr int K = Pack<T>::kN;
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i * K < n; i += stride) {
      Pack<T> x = load_pack(inp + i * K), y;
#pragma unroll
      for (int k = 0; k < K; ++k) y.v[k] = from_f<T>(gelu_f(to_f(x.v[k])));
      store_pack(out + i * K, y);
    }
  } else {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += stride)
      out[i] = from_f<T>(gelu_f(to_f(inp[i])));
  }
}

template <typename T, bool kPacked>
__global__ void gelu_backward_kernel(T* dinp, const T* inp, const T* dout, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  if constexpr (kPacked) {
    constexpr int K = Pack<T>::kN;
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i * K < n; i += stride) {
      Pack<T> x = load_pack(inp + i * K), d = load_pack(dout + i * K), y;
#pragma unroll
      for (int k = 0; k < K; ++k) y.v[k] = from_f<T>(gelu_grad(to_f(x.v[k])) * to_f(d.v[k]));
      store_pack(dinp + i * K, y);
    }
  } else {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += stride)
      dinp[i] = from_f<T>(gelu_grad(to_f(inp[i])) * to_f(dout[i]));
  }
}

}  // namespace

template <typename T>
void gelu_forward(Context& ctx, T* out, const T* inp, size_t n) {
  if (n == 0) return;
  constexpr int K = Pack<T>::kN;
  if (n % K == 0 && aligned16(out) && aligned16(inp))
    gelu_forward_kernel<T, true><<<grid_for(n / K, 256), 256, 0, ctx.stream()>>>(out, inp, n);
  else
    gelu_forward_kernel<T, false><<<grid_for(n, 256), 256, 0, ctx.stream()>>>(out, inp, n);
  check_launch("gelu_forward");
}

template <typename T>
void gelu_backward(Context& ctx, T* dinp, const T* inp, const T* dout, size_t n) {
  if (n == 0) return;
  constexpr int K = Pack<T>::kN;
  if (n % K == 0 && aligned16(dinp) && aligned16(inp) && aligned16(dout))
    gelu_backward_kernel<T, true><<<grid_for(n / K, 256), 256, 0, ctx.stream()>>>(dinp, inp, dout, n);
  else
    gelu_backward_kernel<T, false><<<grid_for(n, 256), 256, 0, ctx.stream()>>>(dinp, inp, dout, n);
  check_launch("gelu_backward");
}

template void gelu_forward<float>(Context&, float*, const float*, size_t);
template void gelu_forward<bf16>(Context&, bf16*, const bf16*, size_t);
template void gelu_backward<float>(Context&, float*, const float*, const float*, size_t);
template void gelu_backward<bf16>(Context&, bf16*, const bf16*, const bf16*, size_t);

}  // namespace flotilla::cuda
