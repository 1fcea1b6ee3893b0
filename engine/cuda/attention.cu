// Flash-attention style causal attention. Non-obvious decisions:
// - One thread owns one query row (forward, dQ) or one key row (dK/dV) and keeps its head
//   vectors in registers; a block of 64 threads streams tiles of the other side's rows through
//   shared memory, where every thread reads the same row at the same time (a broadcast, no bank
//   conflicts). The softmax is online (running max and sum), so (T, T) never exists in memory and
//   the forward saves only lse = max + log(sum) per row.
// - Backward recomputes p = exp(s - lse) and splits into a dQ pass (over keys) and a dK/dV pass
//   (over queries), each output row written by exactly one thread: no atomics, bit-reproducible.
//   D_i = dout_i . out_i comes from a small pre-pass.
// This favours simplicity over peak speed (no tensor cores); docs/cuda.md says so.
#include <string>

#include "engine/core/error.h"
#include "engine/cuda/attention.h"
#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_check.h"

namespace flotilla::cuda {
namespace {

constexpr int kRows = 64;  // threads per block = rows owned per block

template <int HS>
__host__ __device__ constexpr int tile_rows() {
  return HS <= 64 ? 64 : 32;  // keeps two (tile, HS) fp32 tiles within 32 KiB of shared memory
}

template <typename T, int HS>
__global__ void __launch_bounds__(kRows) attention_forward_kernel(T* out, float* lse, const T* qkv, int Tn, int C,
                                                                  int NH, float scale) {
  constexpr int BC = tile_rows<HS>();
  __shared__ float ks[BC][HS];
  __shared__ float vs[BC][HS];
  const int b = blockIdx.y / NH, h = blockIdx.y % NH;
  const int q0 = blockIdx.x * kRows;
  const int i = q0 + threadIdx.x;
  const size_t C3 = 3 * static_cast<size_t>(C);
  const T* base = qkv + static_cast<size_t>(b) * Tn * C3 + static_cast<size_t>(h) * HS;
  float q[HS], o[HS];
  if (i < Tn) {
#pragma unroll
    for (int d = 0; d < HS; ++d) q[d] = to_f(base[static_cast<size_t>(i) * C3 + d]) * scale;
  }
#pragma unroll
  for (int d = 0; d < HS; ++d) o[d] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  const int last = min(q0 + kRows - 1, Tn - 1);
  for (int j0 = 0; j0 <= last; j0 += BC) {
    for (int idx = threadIdx.x; idx < BC * HS; idx += kRows) {
      const int r = idx / HS, d = idx % HS, j = j0 + r;
      ks[r][d] = j < Tn ? to_f(base[static_cast<size_t>(j) * C3 + C + d]) : 0.0f;
      vs[r][d] = j < Tn ? to_f(base[static_cast<size_t>(j) * C3 + 2 * C + d]) : 0.0f;
    }
    __syncthreads();
    if (i < Tn && i >= j0) {
      const int rend = min(BC, i - j0 + 1);
      for (int r = 0; r < rend; ++r) {
        float s = 0.0f;
#pragma unroll
        for (int d = 0; d < HS; ++d) s += q[d] * ks[r][d];
        if (s > m) {
          const float corr = __expf(m - s);  // 0 when m = -inf
          l *= corr;
#pragma unroll
          for (int d = 0; d < HS; ++d) o[d] *= corr;
          m = s;
        }
        const float p = __expf(s - m);
        l += p;
#pragma unroll
        for (int d = 0; d < HS; ++d) o[d] += p * vs[r][d];
      }
    }
    __syncthreads();
  }
  if (i < Tn) {
    const float inv = 1.0f / l;
    T* y = out + (static_cast<size_t>(b) * Tn + i) * C + static_cast<size_t>(h) * HS;
#pragma unroll
    for (int d = 0; d < HS; ++d) y[d] = from_f<T>(o[d] * inv);
    lse[(static_cast<size_t>(b) * NH + h) * Tn + i] = m + logf(l);
  }
}

// dd[(b, h, i)] = sum_d dout[b, i, h, d] * out[b, i, h, d].
template <typename T, int HS>
__global__ void attention_dot_kernel(float* dd, const T* dout, const T* out, int B, int Tn, int C, int NH) {
  const size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t total = static_cast<size_t>(B) * NH * Tn;
  if (idx >= total) return;
  const int i = static_cast<int>(idx % Tn);
  const int h = static_cast<int>((idx / Tn) % NH);
  const int b = static_cast<int>(idx / (static_cast<size_t>(Tn) * NH));
  const size_t off = (static_cast<size_t>(b) * Tn + i) * C + static_cast<size_t>(h) * HS;
  float s = 0.0f;
#pragma unroll
  for (int d = 0; d < HS; ++d) s += to_f(dout[off + d]) * to_f(out[off + d]);
  dd[idx] = s;
}

// dQ: one thread per query row, streaming key/value tiles j <= i.
template <typename T, int HS>
__global__ void __launch_bounds__(kRows) attention_dq_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse,
                                                             const float* dd, int Tn, int C, int NH, float scale) {
  constexpr int BC = tile_rows<HS>();
  __shared__ float ks[BC][HS];
  __shared__ float vs[BC][HS];
  const int b = blockIdx.y / NH, h = blockIdx.y % NH;
  const int q0 = blockIdx.x * kRows;
  const int i = q0 + threadIdx.x;
  const size_t C3 = 3 * static_cast<size_t>(C);
  const T* base = qkv + static_cast<size_t>(b) * Tn * C3 + static_cast<size_t>(h) * HS;
  const T* dob = dout + static_cast<size_t>(b) * Tn * C + static_cast<size_t>(h) * HS;
  float q[HS], g[HS], dq[HS];
  float li = 0.0f, di = 0.0f;
  if (i < Tn) {
#pragma unroll
    for (int d = 0; d < HS; ++d) {
      q[d] = to_f(base[static_cast<size_t>(i) * C3 + d]) * scale;
      g[d] = to_f(dob[static_cast<size_t>(i) * C + d]);
    }
    li = lse[(static_cast<size_t>(b) * NH + h) * Tn + i];
    di = dd[(static_cast<size_t>(b) * NH + h) * Tn + i];
  }
#pragma unroll
  for (int d = 0; d < HS; ++d) dq[d] = 0.0f;
  const int last = min(q0 + kRows - 1, Tn - 1);
  for (int j0 = 0; j0 <= last; j0 += BC) {
    for (int idx = threadIdx.x; idx < BC * HS; idx += kRows) {
      const int r = idx / HS, d = idx % HS, j = j0 + r;
      ks[r][d] = j < Tn ? to_f(base[static_cast<size_t>(j) * C3 + C + d]) : 0.0f;
      vs[r][d] = j < Tn ? to_f(base[static_cast<size_t>(j) * C3 + 2 * C + d]) : 0.0f;
    }
    __syncthreads();
    if (i < Tn && i >= j0) {
      const int rend = min(BC, i - j0 + 1);
      for (int r = 0; r < rend; ++r) {
        float s = 0.0f, dp = 0.0f;
#pragma unroll
        for (int d = 0; d < HS; ++d) {
          s += q[d] * ks[r][d];
          dp += g[d] * vs[r][d];
        }
        const float ds = __expf(s - li) * (dp - di);
#pragma unroll
        for (int d = 0; d < HS; ++d) dq[d] += ds * ks[r][d];
      }
    }
    __syncthreads();
  }
  if (i < Tn) {
    T* y = dqkv + (static_cast<size_t>(b) * Tn + i) * C3 + static_cast<size_t>(h) * HS;
#pragma unroll
    for (int d = 0; d < HS; ++d) y[d] = from_f<T>(dq[d] * scale);
  }
}

// dK, dV: one thread per key row j, streaming query tiles i >= j.
template <typename T, int HS>
__global__ void __launch_bounds__(kRows) attention_dkv_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse,
                                                              const float* dd, int Tn, int C, int NH, float scale) {
  constexpr int BQ = tile_rows<HS>();
  __shared__ float qs[BQ][HS];
  __shared__ float gs[BQ][HS];
  __shared__ float ls[BQ], ds_[BQ];
  const int b = blockIdx.y / NH, h = blockIdx.y % NH;
  const int k0 = blockIdx.x * kRows;
  const int j = k0 + threadIdx.x;
  const size_t C3 = 3 * static_cast<size_t>(C);
  const T* base = qkv + static_cast<size_t>(b) * Tn * C3 + static_cast<size_t>(h) * HS;
  const T* dob = dout + static_cast<size_t>(b) * Tn * C + static_cast<size_t>(h) * HS;
  const float* lrow = lse + (static_cast<size_t>(b) * NH + h) * Tn;
  const float* drow = dd + (static_cast<size_t>(b) * NH + h) * Tn;
  float k[HS], v[HS], dk[HS], dv[HS];
  if (j < Tn) {
#pragma unroll
    for (int d = 0; d < HS; ++d) {
      k[d] = to_f(base[static_cast<size_t>(j) * C3 + C + d]);
      v[d] = to_f(base[static_cast<size_t>(j) * C3 + 2 * C + d]);
    }
  }
#pragma unroll
  for (int d = 0; d < HS; ++d) dk[d] = dv[d] = 0.0f;
  for (int i0 = k0 / BQ * BQ; i0 < Tn; i0 += BQ) {
    for (int idx = threadIdx.x; idx < BQ * HS; idx += kRows) {
      const int r = idx / HS, d = idx % HS, i = i0 + r;
      qs[r][d] = i < Tn ? to_f(base[static_cast<size_t>(i) * C3 + d]) * scale : 0.0f;
      gs[r][d] = i < Tn ? to_f(dob[static_cast<size_t>(i) * C + d]) : 0.0f;
    }
    for (int r = threadIdx.x; r < BQ; r += kRows) {
      ls[r] = i0 + r < Tn ? lrow[i0 + r] : 0.0f;
      ds_[r] = i0 + r < Tn ? drow[i0 + r] : 0.0f;
    }
    __syncthreads();
    if (j < Tn) {
      const int rbeg = j > i0 ? j - i0 : 0;
      const int rend = min(BQ, Tn - i0);
      for (int r = rbeg; r < rend; ++r) {
        float s = 0.0f, dp = 0.0f;
#pragma unroll
        for (int d = 0; d < HS; ++d) {
          s += qs[r][d] * k[d];
          dp += gs[r][d] * v[d];
        }
        const float p = __expf(s - ls[r]);
        const float dsc = p * (dp - ds_[r]);
#pragma unroll
        for (int d = 0; d < HS; ++d) {
          dv[d] += p * gs[r][d];
          dk[d] += dsc * qs[r][d];  // qs is already scaled: d s / d k = scale * q
        }
      }
    }
    __syncthreads();
  }
  if (j < Tn) {
    T* y = dqkv + (static_cast<size_t>(b) * Tn + j) * C3 + static_cast<size_t>(h) * HS;
#pragma unroll
    for (int d = 0; d < HS; ++d) {
      y[C + d] = from_f<T>(dk[d]);
      y[2 * C + d] = from_f<T>(dv[d]);
    }
  }
}

template <typename T, int HS>
void forward_hs(Context& ctx, T* out, float* lse, const T* qkv, int B, int Tn, int C, int NH) {
  const dim3 grid(static_cast<unsigned>((Tn + kRows - 1) / kRows), static_cast<unsigned>(B * NH));
  attention_forward_kernel<T, HS><<<grid, kRows, 0, ctx.stream()>>>(out, lse, qkv, Tn, C, NH,
                                                                      1.0f / sqrtf(static_cast<float>(HS)));
  check_launch("attention_forward");
}

template <typename T, int HS>
void backward_hs(Context& ctx, T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse, int B, int Tn,
                 int C, int NH) {
  const size_t rows = static_cast<size_t>(B) * NH * Tn;
  auto* dd = static_cast<float*>(ctx.scratch(rows * sizeof(float)));
  attention_dot_kernel<T, HS><<<grid_for(rows, 256, rows), 256, 0, ctx.stream()>>>(dd, dout, out, B, Tn, C, NH);
  check_launch("attention_backward (dout . out)");
  const dim3 grid(static_cast<unsigned>((Tn + kRows - 1) / kRows), static_cast<unsigned>(B * NH));
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  attention_dq_kernel<T, HS><<<grid, kRows, 0, ctx.stream()>>>(dqkv, dout, qkv, lse, dd, Tn, C, NH, scale);
  check_launch("attention_backward (dq)");
  attention_dkv_kernel<T, HS><<<grid, kRows, 0, ctx.stream()>>>(dqkv, dout, qkv, lse, dd, Tn, C, NH, scale);
  check_launch("attention_backward (dk, dv)");
}

[[noreturn]] void unsupported(int C, int NH) {
  throw Error(ExitCode::kConfig, "CUDA attention supports head sizes 32, 64 and 128; n_embd " + std::to_string(C) +
                                     " / n_head " + std::to_string(NH) + " is not one of them (change model.n_head)");
}

}  // namespace

template <typename T>
void attention_forward(Context& ctx, T* out, float* lse, const T* qkv, int B, int Tn, int C, int NH) {
  if (B == 0 || Tn == 0) return;
  switch (NH > 0 && C % NH == 0 ? C / NH : 0) {
    case 32:
      return forward_hs<T, 32>(ctx, out, lse, qkv, B, Tn, C, NH);
    case 64:
      return forward_hs<T, 64>(ctx, out, lse, qkv, B, Tn, C, NH);
    case 128:
      return forward_hs<T, 128>(ctx, out, lse, qkv, B, Tn, C, NH);
    default:
      unsupported(C, NH);
  }
}

template <typename T>
void attention_backward(Context& ctx, T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse, int B,
                        int Tn, int C, int NH) {
  if (B == 0 || Tn == 0) return;
  switch (NH > 0 && C % NH == 0 ? C / NH : 0) {
    case 32:
      return backward_hs<T, 32>(ctx, dqkv, dout, qkv, out, lse, B, Tn, C, NH);
    case 64:
      return backward_hs<T, 64>(ctx, dqkv, dout, qkv, out, lse, B, Tn, C, NH);
    case 128:
      return backward_hs<T, 128>(ctx, dqkv, dout, qkv, out, lse, B, Tn, C, NH);
    default:
      unsupported(C, NH);
  }
}

template void attention_forward<float>(Context&, float*, float*, const float*, int, int, int, int);
template void attention_forward<bf16>(Context&, bf16*, float*, const bf16*, int, int, int, int);
template void attention_backward<float>(Context&, float*, const float*, const float*, const float*, const float*, int,
                                        int, int, int);
template void attention_backward<bf16>(Context&, bf16*, const bf16*, const bf16*, const bf16*, const float*, int, int,
                                       int, int);

}  // namespace flotilla::cuda
