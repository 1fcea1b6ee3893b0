// RoPE kernel: one thread per (token, head, pair). Non-obvious decision: the angle is the fp32
// product pos * inv_freq[j] and cos/sin are taken with the accurate cosf/sinf (not __cosf), as on
// the CPU and in transformers, so long positions keep their precision.
#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/rope.h"

namespace flotilla::cuda {
namespace {

template <typename T>
__global__ void rope_kernel(T* qkv, const int32_t* pos, const float* inv_freq, long rows, int Tn, int NH,
                            int NKV, int HD, float sign) {
  const int half = HD / 2, heads = NH + NKV;
  const size_t total = static_cast<size_t>(rows) * heads * half;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t ld = static_cast<size_t>(NH + 2 * NKV) * HD;
  for (size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; idx < total; idx += stride) {
    const int j = static_cast<int>(idx % half);
    const int h = static_cast<int>((idx / half) % heads);
    const size_t r = idx / (static_cast<size_t>(half) * heads);
    const float p =
        static_cast<float>(pos != nullptr ? pos[r] : static_cast<int32_t>(r % static_cast<size_t>(Tn)));
    const float a = p * inv_freq[j];
    const float c = cosf(a), s = sign * sinf(a);
    T* x = qkv + r * ld + static_cast<size_t>(h) * HD;
    const float x0 = to_f(x[j]), x1 = to_f(x[j + half]);
    x[j] = from_f<T>(x0 * c - x1 * s);
    x[j + half] = from_f<T>(x1 * c + x0 * s);
  }
}

template <typename T>
void rotate(Context& ctx, T* qkv, const int32_t* pos, const float* inv_freq, int B, int Tn, int NH, int NKV,
            int HD, float sign, const char* what) {
  const long rows = static_cast<long>(B) * Tn;
  const size_t total = static_cast<size_t>(rows) * (NH + NKV) * (HD / 2);
  if (total == 0) return;
  rope_kernel<T>
      <<<grid_for(total, 256), 256, 0, ctx.stream()>>>(qkv, pos, inv_freq, rows, Tn, NH, NKV, HD, sign);
  check_launch(what);
}

}  // namespace

template <typename T>
void rope_forward(Context& ctx, T* qkv, const int32_t* pos, const float* inv_freq, int B, int Tn, int NH,
                  int NKV, int HD) {
  rotate<T>(ctx, qkv, pos, inv_freq, B, Tn, NH, NKV, HD, 1.0f, "rope_forward");
}

template <typename T>
void rope_backward(Context& ctx, T* dqkv, const int32_t* pos, const float* inv_freq, int B, int Tn, int NH,
                   int NKV, int HD) {
  rotate<T>(ctx, dqkv, pos, inv_freq, B, Tn, NH, NKV, HD, -1.0f, "rope_backward");
}

template void rope_forward<float>(Context&, float*, const int32_t*, const float*, int, int, int, int, int);
template void rope_forward<bf16>(Context&, bf16*, const int32_t*, const float*, int, int, int, int, int);
template void rope_backward<float>(Context&, float*, const int32_t*, const float*, int, int, int, int, int);
template void rope_backward<bf16>(Context&, bf16*, const int32_t*, const float*, int, int, int, int, int);

}  // namespace flotilla::cuda
