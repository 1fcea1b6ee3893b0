// LayerNorm kernels: one warp per row (two passes over the row, which stays in L1/L2), and a
// backward whose weight/bias gradients are summed over fixed row chunks and then over chunks in
// order. Non-obvious decision: the chunk count depends only on N, never on the device, so the
// summation order (and so every bit) is the same on any GPU model and run.
#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/layernorm.h"

namespace flotilla::cuda {
namespace {

constexpr float kEps = 1e-5f;
constexpr int kWarpsPerBlock = 8;

template <typename T, bool kResidual>
__global__ void layernorm_forward_kernel(T* residual, T* out, float* mean, float* rstd, const T* a, const T* b,
                                         const T* weight, const T* bias, long N, int C) {
  const long row = static_cast<long>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= N) return;
  const size_t base = static_cast<size_t>(row) * C;
  const T* x = a + base;
  if constexpr (kResidual) {
    for (int c = lane; c < C; c += 32) residual[base + c] = from_f<T>(to_f(a[base + c]) + to_f(b[base + c]));
    __syncwarp();
    x = residual + base;
  }
  float s = 0.0f;
  for (int c = lane; c < C; c += 32) s += to_f(x[c]);
  const float m = warp_sum(s) / static_cast<float>(C);
  float v = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float d = to_f(x[c]) - m;
    v += d * d;
  }
  const float r = rsqrtf(warp_sum(v) / static_cast<float>(C) + kEps);
  for (int c = lane; c < C; c += 32)
    out[base + c] = from_f<T>((to_f(x[c]) - m) * r * to_f(weight[c]) + to_f(bias[c]));
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

template <typename T>
__global__ void layernorm_dinp_kernel(T* dinp, const T* dout, const T* inp, const T* weight, const float* mean,
                                      const float* rstd, long N, int C) {
  const long row = static_cast<long>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= N) return;
  const size_t base = static_cast<size_t>(row) * C;
  const float m = mean[row], r = rstd[row];
  float s1 = 0.0f, s2 = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float dn = to_f(dout[base + c]) * to_f(weight[c]);
    s1 += dn;
    s2 += dn * (to_f(inp[base + c]) - m) * r;
  }
  const float dmean = warp_sum(s1) / static_cast<float>(C);
  const float dnorm_mean = warp_sum(s2) / static_cast<float>(C);
  for (int c = lane; c < C; c += 32) {
    const float norm = (to_f(inp[base + c]) - m) * r;
    const float d = (to_f(dout[base + c]) * to_f(weight[c]) - dmean - norm * dnorm_mean) * r;
    dinp[base + c] = from_f<T>(to_f(dinp[base + c]) + d);
  }
}

// partial[chunk, c] = sum over the chunk's rows of dout*norm (and of dout), rows in order.
template <typename T>
__global__ void layernorm_partial_kernel(float* pw, float* pb, const T* dout, const T* inp, const float* mean,
                                         const float* rstd, long N, int C, long chunk) {
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const long r0 = static_cast<long>(blockIdx.x) * chunk;
  const long r1 = r0 + chunk < N ? r0 + chunk : N;
  float sw = 0.0f, sb = 0.0f;
  for (long r = r0; r < r1; ++r) {
    const size_t i = static_cast<size_t>(r) * C + c;
    const float d = to_f(dout[i]);
    sw += d * (to_f(inp[i]) - mean[r]) * rstd[r];
    sb += d;
  }
  pw[static_cast<size_t>(blockIdx.x) * C + c] = sw;
  pb[static_cast<size_t>(blockIdx.x) * C + c] = sb;
}

template <typename T>
__global__ void layernorm_final_kernel(T* dweight, T* dbias, const float* pw, const float* pb, int chunks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float sw = 0.0f, sb = 0.0f;
  for (int k = 0; k < chunks; ++k) {
    sw += pw[static_cast<size_t>(k) * C + c];
    sb += pb[static_cast<size_t>(k) * C + c];
  }
  dweight[c] = from_f<T>(to_f(dweight[c]) + sw);
  dbias[c] = from_f<T>(to_f(dbias[c]) + sb);
}

unsigned row_blocks(long N) { return static_cast<unsigned>((N + kWarpsPerBlock - 1) / kWarpsPerBlock); }

}  // namespace

template <typename T>
void layernorm_forward(Context& ctx, T* out, float* mean, float* rstd, const T* inp, const T* weight,
                       const T* bias, long N, int C) {
  if (N == 0) return;
  layernorm_forward_kernel<T, false><<<row_blocks(N), 32 * kWarpsPerBlock, 0, ctx.stream()>>>(
      nullptr, out, mean, rstd, inp, nullptr, weight, bias, N, C);
  check_launch("layernorm_forward");
}

template <typename T>
void residual_layernorm_forward(Context& ctx, T* residual, T* out, float* mean, float* rstd, const T* a,
                                const T* b, const T* weight, const T* bias, long N, int C) {
  if (N == 0) return;
  layernorm_forward_kernel<T, true><<<row_blocks(N), 32 * kWarpsPerBlock, 0, ctx.stream()>>>(
      residual, out, mean, rstd, a, b, weight, bias, N, C);
  check_launch("residual_layernorm_forward");
}

template <typename T>
void layernorm_backward(Context& ctx, T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                        const T* weight, const float* mean, const float* rstd, long N, int C) {
  if (N == 0) return;
  // Column partials first: dinp may alias nothing here, but it is written by the next kernel.
  long chunk = (N + 255) / 256;
  if (chunk < 32) chunk = 32;
  const int chunks = static_cast<int>((N + chunk - 1) / chunk);
  auto* pw = static_cast<float*>(ctx.scratch(2 * static_cast<size_t>(chunks) * C * sizeof(float)));
  float* pb = pw + static_cast<size_t>(chunks) * C;
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>((C + 255) / 256));
  layernorm_partial_kernel<T><<<grid, 256, 0, ctx.stream()>>>(pw, pb, dout, inp, mean, rstd, N, C, chunk);
  check_launch("layernorm_backward (partials)");
  layernorm_final_kernel<T><<<static_cast<unsigned>((C + 255) / 256), 256, 0, ctx.stream()>>>(dweight, dbias, pw, pb,
                                                                                              chunks, C);
  check_launch("layernorm_backward (weight/bias)");
  layernorm_dinp_kernel<T><<<row_blocks(N), 32 * kWarpsPerBlock, 0, ctx.stream()>>>(dinp, dout, inp, weight, mean,
                                                                                   rstd, N, C);
  check_launch("layernorm_backward (dinp)");
}

#define FLOTILLA_LN(T)                                                                                           \
  template void layernorm_forward<T>(Context&, T*, float*, float*, const T*, const T*, const T*, long, int);    \
  template void residual_layernorm_forward<T>(Context&, T*, T*, float*, float*, const T*, const T*, const T*, \
                                              const T*, long, int);                                           \
  template void layernorm_backward<T>(Context&, T*, T*, T*, const T*, const T*, const T*, const float*,        \
                                      const float*, long, int);
FLOTILLA_LN(float)
FLOTILLA_LN(bf16)
#undef FLOTILLA_LN

}  // namespace flotilla::cuda
