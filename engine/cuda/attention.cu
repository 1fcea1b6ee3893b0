// Flash-attention style causal grouped-query attention. Non-obvious decisions:
// - One thread owns one query row (forward, dQ) or one key row (dK/dV) and keeps its head
//   vectors in registers; a block of 64 threads streams tiles of the other side's rows through
//   shared memory, where every thread reads the same row at the same time (a broadcast, no bank
//   conflicts). The softmax is online (running max and sum), so (T, T) never exists in memory and
//   the forward saves only lse = max + log(sum) per row.
// - Backward recomputes p = exp(s - lse) and splits into a dQ pass (over keys) and a dK/dV pass
//   (over queries, every query head of the K/V head's group in turn), each output row written by
//   exactly one thread: no atomics, bit-reproducible. D_i = dout_i . out_i comes from a pre-pass.
// - Packed documents (pos != null): query i sees keys lo_i = i - pos[i] .. i. The forward and dQ
//   blocks start their key loop at the smallest lo_i of the block; the dK/dV pass checks each
//   query's lo against its key.
// - Long sequences: every offset is size_t; the query (key) blocks are grid x (up to 2^31 - 1), and
//   the (batch, head) pairs are y and z (pair_grid), since y alone stops at 65535.
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

struct Geometry {
  int B, Tn, NH, NKV;
  size_t ld, ldo;  // qkv and out row strides
};

// The grids index (batch, head) pairs in y and z: y alone stops at 65535, which B * NH passes at
// e.g. B = 16384 rows of 4 heads (a scoring batch). The pair of this block, or -1 past the last.
dim3 pair_grid(unsigned x, long pairs) {
  const long y = pairs < 65535 ? pairs : 65535;
  return dim3(x, static_cast<unsigned>(y), static_cast<unsigned>((pairs + y - 1) / y));
}
__device__ __forceinline__ int pair_index(long pairs) {
  const long p = static_cast<long>(blockIdx.z) * gridDim.y + blockIdx.y;
  return p < pairs ? static_cast<int>(p) : -1;
}

// The first key query i may see, and the smallest of those over the block's rows (thread 0..).
__device__ __forceinline__ int first_key(const int32_t* pos_row, int i) {
  return pos_row != nullptr ? i - pos_row[i] : 0;
}

__device__ int block_first_key(const int32_t* pos_row, int q0, int Tn, int* shared) {
  const int i = q0 + threadIdx.x;
  shared[threadIdx.x] = i < Tn ? first_key(pos_row, i) : Tn;
  __syncthreads();
  if (threadIdx.x == 0) {
    int m = Tn;
    for (int r = 0; r < kRows; ++r) m = min(m, shared[r]);
    shared[kRows] = m;
  }
  __syncthreads();
  const int m = shared[kRows];
  __syncthreads();
  return m;
}

template <typename T, int HS>
__global__ void __launch_bounds__(kRows)
    attention_forward_kernel(T* out, float* lse, const T* qkv, const int32_t* pos, Geometry g, float scale) {
  constexpr int BC = tile_rows<HS>();
  __shared__ float ks[BC][HS];
  __shared__ float vs[BC][HS];
  __shared__ int lo_s[kRows + 1];
  const int bh = pair_index(static_cast<long>(g.B) * g.NH);
  if (bh < 0) return;  // the whole block
  const int b = bh / g.NH, h = bh % g.NH, kv = h / (g.NH / g.NKV);
  const int q0 = blockIdx.x * kRows;
  const int i = q0 + threadIdx.x;
  const int Tn = g.Tn;
  const T* row0 = qkv + static_cast<size_t>(b) * Tn * g.ld;
  const T* qb = row0 + static_cast<size_t>(h) * HS;
  const T* kb = row0 + static_cast<size_t>(g.NH + kv) * HS;
  const T* vb = row0 + static_cast<size_t>(g.NH + g.NKV + kv) * HS;
  const int32_t* prow = pos != nullptr ? pos + static_cast<size_t>(b) * Tn : nullptr;
  float q[HS], o[HS];
  if (i < Tn) {
#pragma unroll
    for (int d = 0; d < HS; ++d) q[d] = to_f(qb[static_cast<size_t>(i) * g.ld + d]) * scale;
  }
#pragma unroll
  for (int d = 0; d < HS; ++d) o[d] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  const int lo = i < Tn ? first_key(prow, i) : 0;
  const int jstart = block_first_key(prow, q0, Tn, lo_s) / BC * BC;
  const int last = min(q0 + kRows - 1, Tn - 1);
  for (int j0 = jstart; j0 <= last; j0 += BC) {
    for (int idx = threadIdx.x; idx < BC * HS; idx += kRows) {
      const int r = idx / HS, d = idx % HS, j = j0 + r;
      ks[r][d] = j < Tn ? to_f(kb[static_cast<size_t>(j) * g.ld + d]) : 0.0f;
      vs[r][d] = j < Tn ? to_f(vb[static_cast<size_t>(j) * g.ld + d]) : 0.0f;
    }
    __syncthreads();
    if (i < Tn && i >= j0) {
      const int rbeg = lo > j0 ? lo - j0 : 0;
      const int rend = min(BC, i - j0 + 1);
      for (int r = rbeg; r < rend; ++r) {
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
    T* y = out + (static_cast<size_t>(b) * Tn + i) * g.ldo + static_cast<size_t>(h) * HS;
#pragma unroll
    for (int d = 0; d < HS; ++d) y[d] = from_f<T>(o[d] * inv);
    lse[(static_cast<size_t>(b) * g.NH + h) * Tn + i] = m + logf(l);
  }
}

// dd[(b, h, i)] = sum_d dout[b, i, h, d] * out[b, i, h, d].
template <typename T, int HS>
__global__ void attention_dot_kernel(float* dd, const T* dout, const T* out, int B, Geometry g) {
  const size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  const size_t total = static_cast<size_t>(B) * g.NH * g.Tn;
  if (idx >= total) return;
  const int i = static_cast<int>(idx % g.Tn);
  const int h = static_cast<int>((idx / g.Tn) % g.NH);
  const int b = static_cast<int>(idx / (static_cast<size_t>(g.Tn) * g.NH));
  const size_t off = (static_cast<size_t>(b) * g.Tn + i) * g.ldo + static_cast<size_t>(h) * HS;
  float s = 0.0f;
#pragma unroll
  for (int d = 0; d < HS; ++d) s += to_f(dout[off + d]) * to_f(out[off + d]);
  dd[idx] = s;
}

// dQ: one thread per query row, streaming the K/V tiles it sees.
template <typename T, int HS>
__global__ void __launch_bounds__(kRows)
    attention_dq_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* dd,
                        const int32_t* pos, Geometry g, float scale) {
  constexpr int BC = tile_rows<HS>();
  __shared__ float ks[BC][HS];
  __shared__ float vs[BC][HS];
  __shared__ int lo_s[kRows + 1];
  const int bh = pair_index(static_cast<long>(g.B) * g.NH);
  if (bh < 0) return;  // the whole block
  const int b = bh / g.NH, h = bh % g.NH, kv = h / (g.NH / g.NKV);
  const int q0 = blockIdx.x * kRows;
  const int i = q0 + threadIdx.x;
  const int Tn = g.Tn;
  const T* row0 = qkv + static_cast<size_t>(b) * Tn * g.ld;
  const T* qb = row0 + static_cast<size_t>(h) * HS;
  const T* kb = row0 + static_cast<size_t>(g.NH + kv) * HS;
  const T* vb = row0 + static_cast<size_t>(g.NH + g.NKV + kv) * HS;
  const T* dob = dout + static_cast<size_t>(b) * Tn * g.ldo + static_cast<size_t>(h) * HS;
  const int32_t* prow = pos != nullptr ? pos + static_cast<size_t>(b) * Tn : nullptr;
  float q[HS], gr[HS], dq[HS];
  float li = 0.0f, di = 0.0f;
  if (i < Tn) {
#pragma unroll
    for (int d = 0; d < HS; ++d) {
      q[d] = to_f(qb[static_cast<size_t>(i) * g.ld + d]) * scale;
      gr[d] = to_f(dob[static_cast<size_t>(i) * g.ldo + d]);
    }
    li = lse[(static_cast<size_t>(b) * g.NH + h) * Tn + i];
    di = dd[(static_cast<size_t>(b) * g.NH + h) * Tn + i];
  }
#pragma unroll
  for (int d = 0; d < HS; ++d) dq[d] = 0.0f;
  const int lo = i < Tn ? first_key(prow, i) : 0;
  const int jstart = block_first_key(prow, q0, Tn, lo_s) / BC * BC;
  const int last = min(q0 + kRows - 1, Tn - 1);
  for (int j0 = jstart; j0 <= last; j0 += BC) {
    for (int idx = threadIdx.x; idx < BC * HS; idx += kRows) {
      const int r = idx / HS, d = idx % HS, j = j0 + r;
      ks[r][d] = j < Tn ? to_f(kb[static_cast<size_t>(j) * g.ld + d]) : 0.0f;
      vs[r][d] = j < Tn ? to_f(vb[static_cast<size_t>(j) * g.ld + d]) : 0.0f;
    }
    __syncthreads();
    if (i < Tn && i >= j0) {
      const int rbeg = lo > j0 ? lo - j0 : 0;
      const int rend = min(BC, i - j0 + 1);
      for (int r = rbeg; r < rend; ++r) {
        float s = 0.0f, dp = 0.0f;
#pragma unroll
        for (int d = 0; d < HS; ++d) {
          s += q[d] * ks[r][d];
          dp += gr[d] * vs[r][d];
        }
        const float ds = __expf(s - li) * (dp - di);
#pragma unroll
        for (int d = 0; d < HS; ++d) dq[d] += ds * ks[r][d];
      }
    }
    __syncthreads();
  }
  if (i < Tn) {
    T* y = dqkv + (static_cast<size_t>(b) * Tn + i) * g.ld + static_cast<size_t>(h) * HS;
#pragma unroll
    for (int d = 0; d < HS; ++d) y[d] = from_f<T>(dq[d] * scale);
  }
}

// dK, dV: one thread per key row j of K/V head kv, streaming the query tiles i >= j of every query
// head of the group, in head order.
template <typename T, int HS>
__global__ void __launch_bounds__(kRows)
    attention_dkv_kernel(T* dqkv, const T* dout, const T* qkv, const float* lse, const float* dd,
                         const int32_t* pos, Geometry g, float scale) {
  constexpr int BQ = tile_rows<HS>();
  __shared__ float qs[BQ][HS];
  __shared__ float gs[BQ][HS];
  __shared__ float ls[BQ], ds_[BQ];
  __shared__ int lo_s[BQ];
  const int bkv = pair_index(static_cast<long>(g.B) * g.NKV);
  if (bkv < 0) return;  // the whole block
  const int b = bkv / g.NKV, kv = bkv % g.NKV, group = g.NH / g.NKV;
  const int k0 = blockIdx.x * kRows;
  const int j = k0 + threadIdx.x;
  const int Tn = g.Tn;
  const T* row0 = qkv + static_cast<size_t>(b) * Tn * g.ld;
  const T* kb = row0 + static_cast<size_t>(g.NH + kv) * HS;
  const T* vb = row0 + static_cast<size_t>(g.NH + g.NKV + kv) * HS;
  const int32_t* prow = pos != nullptr ? pos + static_cast<size_t>(b) * Tn : nullptr;
  float k[HS], v[HS], dk[HS], dv[HS];
  if (j < Tn) {
#pragma unroll
    for (int d = 0; d < HS; ++d) {
      k[d] = to_f(kb[static_cast<size_t>(j) * g.ld + d]);
      v[d] = to_f(vb[static_cast<size_t>(j) * g.ld + d]);
    }
  }
#pragma unroll
  for (int d = 0; d < HS; ++d) dk[d] = dv[d] = 0.0f;
  for (int h = kv * group; h < (kv + 1) * group; ++h) {
    const T* qb = row0 + static_cast<size_t>(h) * HS;
    const T* dob = dout + static_cast<size_t>(b) * Tn * g.ldo + static_cast<size_t>(h) * HS;
    const float* lrow = lse + (static_cast<size_t>(b) * g.NH + h) * Tn;
    const float* drow = dd + (static_cast<size_t>(b) * g.NH + h) * Tn;
    for (int i0 = k0 / BQ * BQ; i0 < Tn; i0 += BQ) {
      for (int idx = threadIdx.x; idx < BQ * HS; idx += kRows) {
        const int r = idx / HS, d = idx % HS, i = i0 + r;
        qs[r][d] = i < Tn ? to_f(qb[static_cast<size_t>(i) * g.ld + d]) * scale : 0.0f;
        gs[r][d] = i < Tn ? to_f(dob[static_cast<size_t>(i) * g.ldo + d]) : 0.0f;
      }
      for (int r = threadIdx.x; r < BQ; r += kRows) {
        ls[r] = i0 + r < Tn ? lrow[i0 + r] : 0.0f;
        ds_[r] = i0 + r < Tn ? drow[i0 + r] : 0.0f;
        lo_s[r] = i0 + r < Tn ? first_key(prow, i0 + r) : Tn;
      }
      __syncthreads();
      if (j < Tn) {
        const int rbeg = j > i0 ? j - i0 : 0;
        const int rend = min(BQ, Tn - i0);
        for (int r = rbeg; r < rend; ++r) {
          if (lo_s[r] > j) continue;  // that query's document starts after this key
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
  }
  if (j < Tn) {
    T* y = dqkv + (static_cast<size_t>(b) * Tn + j) * g.ld;
#pragma unroll
    for (int d = 0; d < HS; ++d) {
      y[static_cast<size_t>(g.NH + kv) * HS + d] = from_f<T>(dk[d]);
      y[static_cast<size_t>(g.NH + g.NKV + kv) * HS + d] = from_f<T>(dv[d]);
    }
  }
}

Geometry geometry(int B, int Tn, int NH, int NKV, int HD) {
  return Geometry{B, Tn, NH, NKV, static_cast<size_t>(NH + 2 * NKV) * HD, static_cast<size_t>(NH) * HD};
}

template <typename T, int HS>
void forward_hs(Context& ctx, T* out, float* lse, const T* qkv, const int32_t* pos, int B, int Tn, int NH,
                int NKV) {
  const dim3 grid = pair_grid(static_cast<unsigned>((Tn + kRows - 1) / kRows), static_cast<long>(B) * NH);
  attention_forward_kernel<T, HS><<<grid, kRows, 0, ctx.stream()>>>(
      out, lse, qkv, pos, geometry(B, Tn, NH, NKV, HS), 1.0f / sqrtf(static_cast<float>(HS)));
  check_launch("attention_forward");
}

template <typename T, int HS>
void backward_hs(Context& ctx, T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse,
                 const int32_t* pos, int B, int Tn, int NH, int NKV) {
  const Geometry g = geometry(B, Tn, NH, NKV, HS);
  const size_t rows = static_cast<size_t>(B) * NH * Tn;
  auto* dd = static_cast<float*>(ctx.scratch(rows * sizeof(float)));
  attention_dot_kernel<T, HS><<<grid_for(rows, 256, rows), 256, 0, ctx.stream()>>>(dd, dout, out, B, g);
  check_launch("attention_backward (dout . out)");
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  const unsigned tiles = static_cast<unsigned>((Tn + kRows - 1) / kRows);
  attention_dq_kernel<T, HS><<<pair_grid(tiles, static_cast<long>(B) * NH), kRows, 0, ctx.stream()>>>(
      dqkv, dout, qkv, lse, dd, pos, g, scale);
  check_launch("attention_backward (dq)");
  attention_dkv_kernel<T, HS><<<pair_grid(tiles, static_cast<long>(B) * NKV), kRows, 0, ctx.stream()>>>(
      dqkv, dout, qkv, lse, dd, pos, g, scale);
  check_launch("attention_backward (dk, dv)");
}

void check_heads(int NH, int NKV, int HD) {
  if (NH < 1 || NKV < 1 || NH % NKV != 0)
    throw Error(ExitCode::kConfig, "CUDA attention: n_kv_head " + std::to_string(NKV) +
                                       " must divide n_head " + std::to_string(NH));
  if (HD != 8 && HD != 16 && HD != 32 && HD != 64 && HD != 128)
    throw Error(ExitCode::kConfig, "CUDA attention supports head sizes 8, 16, 32, 64 and 128; head_dim " +
                                       std::to_string(HD) +
                                       " is not one of them (change model.n_head or head_dim)");
}

}  // namespace

template <typename T>
void attention_forward(Context& ctx, T* out, float* lse, const T* qkv, const int32_t* pos, int B, int Tn,
                       int NH, int NKV, int HD) {
  if (B == 0 || Tn == 0) return;
  check_heads(NH, NKV, HD);
  switch (HD) {
    case 8:
      return forward_hs<T, 8>(ctx, out, lse, qkv, pos, B, Tn, NH, NKV);
    case 16:
      return forward_hs<T, 16>(ctx, out, lse, qkv, pos, B, Tn, NH, NKV);
    case 32:
      return forward_hs<T, 32>(ctx, out, lse, qkv, pos, B, Tn, NH, NKV);
    case 64:
      return forward_hs<T, 64>(ctx, out, lse, qkv, pos, B, Tn, NH, NKV);
    default:
      return forward_hs<T, 128>(ctx, out, lse, qkv, pos, B, Tn, NH, NKV);
  }
}

template <typename T>
void attention_backward(Context& ctx, T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse,
                        const int32_t* pos, int B, int Tn, int NH, int NKV, int HD) {
  if (B == 0 || Tn == 0) return;
  check_heads(NH, NKV, HD);
  switch (HD) {
    case 8:
      return backward_hs<T, 8>(ctx, dqkv, dout, qkv, out, lse, pos, B, Tn, NH, NKV);
    case 16:
      return backward_hs<T, 16>(ctx, dqkv, dout, qkv, out, lse, pos, B, Tn, NH, NKV);
    case 32:
      return backward_hs<T, 32>(ctx, dqkv, dout, qkv, out, lse, pos, B, Tn, NH, NKV);
    case 64:
      return backward_hs<T, 64>(ctx, dqkv, dout, qkv, out, lse, pos, B, Tn, NH, NKV);
    default:
      return backward_hs<T, 128>(ctx, dqkv, dout, qkv, out, lse, pos, B, Tn, NH, NKV);
  }
}

template void attention_forward<float>(Context&, float*, float*, const float*, const int32_t*, int, int, int,
                                       int, int);
template void attention_forward<bf16>(Context&, bf16*, float*, const bf16*, const int32_t*, int, int, int,
                                      int, int);
template void attention_backward<float>(Context&, float*, const float*, const float*, const float*,
                                        const float*, const int32_t*, int, int, int, int, int);
template void attention_backward<bf16>(Context&, bf16*, const bf16*, const bf16*, const bf16*, const float*,
                                       const int32_t*, int, int, int, int, int);

}  // namespace flotilla::cuda
