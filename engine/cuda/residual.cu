// Residual add, scaling and dtype conversion: elementwise kernels with 16-byte packed loads where
// sizes and alignment allow (non-obvious decision as in gelu.cu: the host picks the path).
#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/residual.h"

namespace flotilla::cuda {
namespace {

template <typename T, bool kPacked>
__global__ void residual_kernel(T* out, const T* a, const T* b, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  if constexpr (kPacked) {
    constexpr int K = Pack<T>::kN;
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i * K < n; i += stride) {
      Pack<T> x = load_pack(a + i * K), y = load_pack(b + i * K), z;
#pragma unroll
      for (int k = 0; k < K; ++k) z.v[k] = from_f<T>(to_f(x.v[k]) + to_f(y.v[k]));
      store_pack(out + i * K, z);
    }
  } else {
    for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += stride)
      out[i] = from_f<T>(to_f(a[i]) + to_f(b[i]));
  }
}

__global__ void scale_kernel(float* g, size_t n, float s) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += stride) g[i] *= s;
}

template <typename To, typename From>
__global__ void convert_kernel(To* out, const From* in, size_t n) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += stride)
    out[i] = from_f<To>(to_f(in[i]));
}

}  // namespace

template <typename T>
void residual_forward(Context& ctx, T* out, const T* a, const T* b, size_t n) {
  if (n == 0) return;
  constexpr int K = Pack<T>::kN;
  if (n % K == 0 && aligned16(out) && aligned16(a) && aligned16(b))
    residual_kernel<T, true><<<grid_for(n / K, 256), 256, 0, ctx.stream()>>>(out, a, b, n);
  else
    residual_kernel<T, false><<<grid_for(n, 256), 256, 0, ctx.stream()>>>(out, a, b, n);
  check_launch("residual_forward");
}

void scale_values(Context& ctx, float* g, size_t n, float s) {
  if (n == 0) return;
  scale_kernel<<<grid_for(n, 256), 256, 0, ctx.stream()>>>(g, n, s);
  check_launch("scale_values");
}

void convert(Context& ctx, bf16* out, const float* in, size_t n) {
  if (n == 0) return;
  convert_kernel<bf16, float><<<grid_for(n, 256), 256, 0, ctx.stream()>>>(out, in, n);
  check_launch("convert fp32->bf16");
}

void convert(Context& ctx, float* out, const bf16* in, size_t n) {
  if (n == 0) return;
  convert_kernel<float, bf16><<<grid_for(n, 256), 256, 0, ctx.stream()>>>(out, in, n);
  check_launch("convert bf16->fp32");
}

template void residual_forward<float>(Context&, float*, const float*, const float*, size_t);
template void residual_forward<bf16>(Context&, bf16*, const bf16*, const bf16*, size_t);

}  // namespace flotilla::cuda
