// RMSNorm kernels: one warp per row (or per head for q/k norm), and weight gradients summed over
// fixed row chunks and then over chunks in order. Non-obvious decision (as LayerNorm's): the chunk
// count depends only on N, never on the device, so every bit is the same on any GPU and run; the
// q/k norm's weight gradient is written before its input gradient so that pass may run in place.
#include <string>

#include "engine/core/error.h"
#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/rmsnorm.h"

namespace flotilla::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

unsigned warp_blocks(long rows) {
  return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

template <typename T, bool kResidual>
__global__ void rmsnorm_forward_kernel(T* residual, T* out, float* rstd, const T* a, const T* b,
                                       const T* weight, long N, int C, float eps) {
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
  float ss = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float v = to_f(x[c]);
    ss += v * v;
  }
  const float r = rsqrtf(warp_sum(ss) / static_cast<float>(C) + eps);
  for (int c = lane; c < C; c += 32) out[base + c] = from_f<T>(to_f(x[c]) * r * to_f(weight[c]));
  if (lane == 0) rstd[row] = r;
}

// One warp per (row, head) of C values at stride `ld`: dx (+)= (w*d - xhat * mean(w*d*xhat)) * r.
template <typename T>
__device__ void row_backward(T* dx, const T* d, const T* x, const T* w, float r, int C, int lane, bool add) {
  float dot = 0.0f;
  for (int c = lane; c < C; c += 32) dot += to_f(d[c]) * to_f(w[c]) * to_f(x[c]) * r;
  const float mean_dot = warp_sum(dot) / static_cast<float>(C);
  float v[8];  // a head of up to 256 values, read before it is written (in place allowed)
  int k = 0;
  for (int c = lane; c < C; c += 32, ++k) v[k] = (to_f(d[c]) * to_f(w[c]) - to_f(x[c]) * r * mean_dot) * r;
  __syncwarp();
  k = 0;
  for (int c = lane; c < C; c += 32, ++k) dx[c] = from_f<T>(add ? to_f(dx[c]) + v[k] : v[k]);
}

template <typename T>
__global__ void rmsnorm_dinp_kernel(T* dinp, const T* dout, const T* inp, const T* weight, const float* rstd,
                                    long N, int C) {
  const long row = static_cast<long>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= N) return;
  const size_t base = static_cast<size_t>(row) * C;
  const float r = rstd[row];
  float dot = 0.0f;
  for (int c = lane; c < C; c += 32) dot += to_f(dout[base + c]) * to_f(weight[c]) * to_f(inp[base + c]) * r;
  const float mean_dot = warp_sum(dot) / static_cast<float>(C);
  for (int c = lane; c < C; c += 32) {
    const float d = (to_f(dout[base + c]) * to_f(weight[c]) - to_f(inp[base + c]) * r * mean_dot) * r;
    dinp[base + c] = from_f<T>(to_f(dinp[base + c]) + d);
  }
}

// partial[chunk, c] = sum over the chunk's rows of dout * inp * rstd, rows in order. For the q/k
// norm, "rows" are (token, head) pairs of one weight's heads: row r is token r / heads, head
// h0 + r % heads, at stride ld.
template <typename T>
__global__ void rms_partial_kernel(float* pw, const T* dout, const T* inp, const float* rstd, long rows,
                                   int C, long chunk, int heads, int h0, size_t ld, int rstd_heads) {
  const int c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const long r0 = static_cast<long>(blockIdx.x) * chunk;
  const long r1 = r0 + chunk < rows ? r0 + chunk : rows;
  float sw = 0.0f;
  for (long r = r0; r < r1; ++r) {
    const long token = r / heads;
    const int h = h0 + static_cast<int>(r % heads);
    const size_t i = static_cast<size_t>(token) * ld + static_cast<size_t>(h) * C + c;
    sw += to_f(dout[i]) * to_f(inp[i]) * rstd[static_cast<size_t>(token) * rstd_heads + h];
  }
  pw[static_cast<size_t>(blockIdx.x) * C + c] = sw;
}

template <typename T>
__global__ void rms_final_kernel(T* dweight, const float* pw, int chunks, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float sw = 0.0f;
  for (int k = 0; k < chunks; ++k) sw += pw[static_cast<size_t>(k) * C + c];
  dweight[c] = from_f<T>(to_f(dweight[c]) + sw);
}

// dweight += sum over `rows` rows (see rms_partial_kernel).
template <typename T>
void weight_grad(Context& ctx, T* dweight, const T* dout, const T* inp, const float* rstd, long rows, int C,
                 int heads, int h0, size_t ld, int rstd_heads) {
  long chunk = (rows + 255) / 256;
  if (chunk < 32) chunk = 32;
  const int chunks = static_cast<int>((rows + chunk - 1) / chunk);
  auto* pw = static_cast<float*>(ctx.scratch(static_cast<size_t>(chunks) * C * sizeof(float)));
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>((C + 255) / 256));
  rms_partial_kernel<T>
      <<<grid, 256, 0, ctx.stream()>>>(pw, dout, inp, rstd, rows, C, chunk, heads, h0, ld, rstd_heads);
  check_launch("rmsnorm_backward (partials)");
  rms_final_kernel<T>
      <<<static_cast<unsigned>((C + 255) / 256), 256, 0, ctx.stream()>>>(dweight, pw, chunks, C);
  check_launch("rmsnorm_backward (weight)");
}

template <typename T>
__global__ void qk_norm_forward_kernel(T* out, float* rstd, const T* inp, const T* qw, const T* kw, long N,
                                       int NH, int NKV, int HD, float eps) {
  const int heads = NH + NKV;
  const long task = static_cast<long>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (task >= N * (heads + 1)) return;
  const long token = task / (heads + 1);
  const int h = static_cast<int>(task % (heads + 1));
  const size_t ld = static_cast<size_t>(NH + 2 * NKV) * HD;
  const T* x = inp + static_cast<size_t>(token) * ld;
  T* o = out + static_cast<size_t>(token) * ld;
  if (h == heads) {  // the v heads: copied
    for (int c = lane; c < NKV * HD; c += 32)
      o[static_cast<size_t>(heads) * HD + c] = x[static_cast<size_t>(heads) * HD + c];
    return;
  }
  const T* w = h < NH ? qw : kw;
  const T* xh = x + static_cast<size_t>(h) * HD;
  float ss = 0.0f;
  for (int c = lane; c < HD; c += 32) {
    const float v = to_f(xh[c]);
    ss += v * v;
  }
  const float r = rsqrtf(warp_sum(ss) / static_cast<float>(HD) + eps);
  for (int c = lane; c < HD; c += 32)
    o[static_cast<size_t>(h) * HD + c] = from_f<T>(to_f(xh[c]) * r * to_f(w[c]));
  if (lane == 0) rstd[static_cast<size_t>(token) * heads + h] = r;
}

template <typename T>
__global__ void qk_norm_dinp_kernel(T* dinp, const T* dout, const T* inp, const T* qw, const T* kw,
                                    const float* rstd, long N, int NH, int NKV, int HD) {
  const int heads = NH + NKV;
  const long task = static_cast<long>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (task >= N * (heads + 1)) return;
  const long token = task / (heads + 1);
  const int h = static_cast<int>(task % (heads + 1));
  const size_t ld = static_cast<size_t>(NH + 2 * NKV) * HD, base = static_cast<size_t>(token) * ld;
  if (h == heads) {
    if (dinp != dout)
      for (int c = lane; c < NKV * HD; c += 32)
        dinp[base + static_cast<size_t>(heads) * HD + c] = dout[base + static_cast<size_t>(heads) * HD + c];
    return;
  }
  const size_t ho = base + static_cast<size_t>(h) * HD;
  row_backward<T>(dinp + ho, dout + ho, inp + ho, h < NH ? qw : kw,
                  rstd[static_cast<size_t>(token) * heads + h], HD, lane, false);
}

}  // namespace

template <typename T>
void rmsnorm_forward(Context& ctx, T* out, float* rstd, const T* inp, const T* weight, long N, int C,
                     float eps) {
  if (N == 0) return;
  rmsnorm_forward_kernel<T, false><<<warp_blocks(N), 32 * kWarpsPerBlock, 0, ctx.stream()>>>(
      nullptr, out, rstd, inp, nullptr, weight, N, C, eps);
  check_launch("rmsnorm_forward");
}

template <typename T>
void residual_rmsnorm_forward(Context& ctx, T* residual, T* out, float* rstd, const T* a, const T* b,
                              const T* weight, long N, int C, float eps) {
  if (N == 0) return;
  rmsnorm_forward_kernel<T, true><<<warp_blocks(N), 32 * kWarpsPerBlock, 0, ctx.stream()>>>(
      residual, out, rstd, a, b, weight, N, C, eps);
  check_launch("residual_rmsnorm_forward");
}

template <typename T>
void rmsnorm_backward(Context& ctx, T* dinp, T* dweight, const T* dout, const T* inp, const T* weight,
                      const float* rstd, long N, int C) {
  if (N == 0) return;
  if (dweight != nullptr)
    weight_grad<T>(ctx, dweight, dout, inp, rstd, N, C, 1, 0, static_cast<size_t>(C), 1);
  rmsnorm_dinp_kernel<T>
      <<<warp_blocks(N), 32 * kWarpsPerBlock, 0, ctx.stream()>>>(dinp, dout, inp, weight, rstd, N, C);
  check_launch("rmsnorm_backward (dinp)");
}

template <typename T>
void qk_norm_forward(Context& ctx, T* out, float* rstd, const T* inp, const T* qw, const T* kw, long N,
                     int NH, int NKV, int HD, float eps) {
  if (N == 0) return;
  if (HD > 256)
    throw Error(ExitCode::kConfig, "CUDA qk_norm supports head_dim up to 256, not " + std::to_string(HD));
  const long tasks = N * (NH + NKV + 1);
  qk_norm_forward_kernel<T><<<warp_blocks(tasks), 32 * kWarpsPerBlock, 0, ctx.stream()>>>(
      out, rstd, inp, qw, kw, N, NH, NKV, HD, eps);
  check_launch("qk_norm_forward");
}

template <typename T>
void qk_norm_backward(Context& ctx, T* dinp, T* dqw, T* dkw, const T* dout, const T* inp, const T* qw,
                      const T* kw, const float* rstd, long N, int NH, int NKV, int HD) {
  if (N == 0) return;
  if (HD > 256)
    throw Error(ExitCode::kConfig, "CUDA qk_norm supports head_dim up to 256, not " + std::to_string(HD));
  const int heads = NH + NKV;
  const size_t ld = static_cast<size_t>(NH + 2 * NKV) * HD;
  // Weight gradients first: the input gradient may overwrite dout.
  if (dqw != nullptr) weight_grad<T>(ctx, dqw, dout, inp, rstd, N * NH, HD, NH, 0, ld, heads);
  if (dkw != nullptr) weight_grad<T>(ctx, dkw, dout, inp, rstd, N * NKV, HD, NKV, NH, ld, heads);
  const long tasks = N * (heads + 1);
  qk_norm_dinp_kernel<T><<<warp_blocks(tasks), 32 * kWarpsPerBlock, 0, ctx.stream()>>>(
      dinp, dout, inp, qw, kw, rstd, N, NH, NKV, HD);
  check_launch("qk_norm_backward (dinp)");
}

#define FLOTILLA_RMS(T)                                                                                     \
  template void rmsnorm_forward<T>(Context&, T*, float*, const T*, const T*, long, int, float);             \
  template void residual_rmsnorm_forward<T>(Context&, T*, T*, float*, const T*, const T*, const T*, long,   \
                                            int, float);                                                    \
  template void rmsnorm_backward<T>(Context&, T*, T*, const T*, const T*, const T*, const float*, long,     \
                                    int);                                                                   \
  template void qk_norm_forward<T>(Context&, T*, float*, const T*, const T*, const T*, long, int, int, int, \
                                   float);                                                                  \
  template void qk_norm_backward<T>(Context&, T*, T*, T*, const T*, const T*, const T*, const T*,           \
                                    const float*, long, int, int, int);
FLOTILLA_RMS(float)
FLOTILLA_RMS(bf16)
#undef FLOTILLA_RMS

}  // namespace flotilla::cuda
