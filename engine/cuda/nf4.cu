// NF4 matmuls on the GPU: W dequantised slab by slab into shared memory beside the activations,
// a 128 x 128 output tile per block, 8 x 8 outputs per thread in fp32 (nf4.h says why SIMT).
#include <string>

#include "engine/core/error.h"
#include "engine/core/nf4.h"
#include "engine/cpu/nf4_matmul.h"
#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/nf4.h"

namespace flotilla::cuda {
namespace {

constexpr int kTile = 128;     // output tile: 128 tokens x 128 W rows (forward) or columns (backward)
constexpr int kStep = 32;      // reduction depth per shared-memory slab (half a 64-code block)
constexpr int kThreads = 256;  // 16 x 16 threads, 8 x 8 outputs each
constexpr int kPad = 4;        // keeps the slab rows 16-byte aligned, spreads the transposed stores

// The 16 NF4 values, passed by value from nf4::kCode (their one definition) with every launch.
struct Codes {
  float v[16];
};

Codes nf4_codes() {
  Codes c;
  for (int i = 0; i < 16; ++i) c.v[i] = nf4::kCode[i];
  return c;
}

// bitsandbytes' w = code * absmax: one fp32 multiply, never contracted with anything, then rounded
// to the storage type (bf16 storage computes in bf16; the value widened back is exact).
template <typename T>
__device__ __forceinline__ float weight_value(float code, float absmax) {
#ifdef __CUDA_ARCH__
  const float v = __fmul_rn(code, absmax);
#else
  const float v = code * absmax;
#endif
  return to_f(from_f<T>(v));
}

// 16 consecutive values of W row r from column c (a multiple of 16, inside one 64-code block).
template <typename T>
__device__ __forceinline__ void dequant16(float* vals, const nf4::View& w, const float* code, int r, int c) {
  const float a = nf4::view_absmax(w, r, c / nf4::kBlock);
  const uint8_t* p = w.packed + (static_cast<int64_t>(r) * w.cols + c) / 2;
#pragma unroll
  for (int b = 0; b < 8; ++b) {
    const uint8_t byte = p[b];
    vals[2 * b] = weight_value<T>(code[byte >> 4], a);
    vals[2 * b + 1] = weight_value<T>(code[byte & 0x0F], a);
  }
}

// acc[i][j] += a_slab[k][m(i)] * b_slab[k][n(j)] over the slab; thread (tx, ty) owns tokens
// ty*4 + {0..3} and 64 + ty*4 + {0..3}, outputs tx*4 + {0..3} and 64 + tx*4 + {0..3}.
__device__ __forceinline__ void slab_product(float (&acc)[8][8], float (*as)[kTile + kPad],
                                             float (*bs)[kTile + kPad], int tx, int ty) {
#pragma unroll 4
  for (int k = 0; k < kStep; ++k) {
    // 16-byte shared loads (the slab rows are 16-byte aligned): a quarter of the load instructions.
    const Pack<float> a0 = load_pack(&as[k][ty * 4]), a1 = load_pack(&as[k][64 + ty * 4]);
    const Pack<float> b0 = load_pack(&bs[k][tx * 4]), b1 = load_pack(&bs[k][64 + tx * 4]);
    float a[8], b[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      a[i] = a0.v[i], a[4 + i] = a1.v[i];
      b[i] = b0.v[i], b[4 + i] = b1.v[i];
    }
#pragma unroll
    for (int i = 0; i < 8; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
  }
}

// A [kStep][kTile + kPad] slab of shared memory, 16-byte aligned (declared as 16-byte packs).
using Slab = float (*)[kTile + kPad];
constexpr int kSlabPacks = kStep * (kTile + kPad) / 4;

__device__ __forceinline__ int tile_offset(int part, int t) {
  return part < 4 ? t * 4 + part : 64 + t * 4 + part - 4;
}

// Loads the activation slab: rows m0 .. m0+128 of src (ld apart), columns k0 .. k0+32 (those at or
// beyond kmax, and rows at or beyond N, as zeros), transposed into s[k][m].
template <typename T>
__device__ __forceinline__ void load_activations(Slab s, const T* src, int ld, int m0, int N, int k0,
                                                 int kmax, int tid) {
  const int m_base = tid / 8, k = (tid % 8) * 4;
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    const int m = m_base + 32 * p;
    const bool row_ok = m0 + m < N;
#pragma unroll
    for (int j = 0; j < 4; ++j)
      s[k + j][m] =
          row_ok && k0 + k + j < kmax ? to_f(src[static_cast<size_t>(m0 + m) * ld + k0 + k + j]) : 0.0f;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    nf4_forward_kernel(T* out, int ldo, const T* inp, nf4::View w, const T* bias, int N, Codes codes) {
  __shared__ Pack<float> xs_packs[kSlabPacks], ws_packs[kSlabPacks];
  const Slab xs = reinterpret_cast<Slab>(xs_packs);  // xs[k][token]
  const Slab ws = reinterpret_cast<Slab>(ws_packs);  // ws[k][W row]: the dequantised slab
  __shared__ float code[16];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int r0 = blockIdx.x * kTile, m0 = blockIdx.y * kTile;
  if (tid < 16) code[tid] = codes.v[tid];
  __syncthreads();
  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;
  const int wr = tid / 2, wk = (tid % 2) * 16;  // this thread dequantises W row r0 + wr, 16 codes at wk
  for (int k0 = 0; k0 < w.cols; k0 += kStep) {
    float vals[16];
    if (r0 + wr < w.rows) {
      dequant16<T>(vals, w, code, r0 + wr, k0 + wk);
    } else {
#pragma unroll
      for (int i = 0; i < 16; ++i) vals[i] = 0.0f;
    }
#pragma unroll
    for (int i = 0; i < 16; ++i) ws[wk + i][wr] = vals[i];
    load_activations(xs, inp, w.cols, m0, N, k0, w.cols, tid);
    __syncthreads();
    slab_product(acc, xs, ws, tx, ty);
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int m = m0 + tile_offset(i, ty);
    if (m >= N) continue;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int r = r0 + tile_offset(j, tx);
      if (r >= w.rows) continue;
      float v = acc[i][j];
      if (bias != nullptr) v += to_f(bias[r]);
      out[static_cast<size_t>(m) * ldo + r] = from_f<T>(v);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    nf4_backward_kernel(T* dinp, const T* dout, int ldd, nf4::View w, int N, bool accumulate, Codes codes) {
  __shared__ Pack<float> ds_packs[kSlabPacks], ws_packs[kSlabPacks];
  const Slab ds = reinterpret_cast<Slab>(ds_packs);  // ds[k][token]: dout's columns k0 + k
  const Slab ws = reinterpret_cast<Slab>(ws_packs);  // ws[k][column]: W row k0 + k, the tile's columns
  __shared__ float code[16];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int c0 = blockIdx.x * kTile, m0 = blockIdx.y * kTile;
  if (tid < 16) code[tid] = codes.v[tid];
  __syncthreads();
  float acc[8][8];
#pragma unroll
  for (int i = 0; i < 8; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[i][j] = 0.0f;
  const int wk = tid / 8, wc = (tid % 8) * 16;  // this thread dequantises W row k0 + wk, columns c0 + wc ..
  for (int k0 = 0; k0 < w.rows; k0 += kStep) {
    float vals[16];
    if (k0 + wk < w.rows && c0 + wc < w.cols) {
      dequant16<T>(vals, w, code, k0 + wk, c0 + wc);
    } else {
#pragma unroll
      for (int i = 0; i < 16; ++i) vals[i] = 0.0f;
    }
#pragma unroll
    for (int q = 0; q < 4; ++q) {  // 16 consecutive floats, 16-byte aligned: four 16-byte stores
      Pack<float> v;
#pragma unroll
      for (int i = 0; i < 4; ++i) v.v[i] = vals[4 * q + i];
      store_pack(&ws[wk][wc + 4 * q], v);
    }
    load_activations(ds, dout, ldd, m0, N, k0, w.rows, tid);
    __syncthreads();
    slab_product(acc, ds, ws, tx, ty);
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int m = m0 + tile_offset(i, ty);
    if (m >= N) continue;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int c = c0 + tile_offset(j, tx);
      if (c >= w.cols) continue;
      T* d = dinp + static_cast<size_t>(m) * w.cols + c;
      *d = from_f<T>(accumulate ? to_f(*d) + acc[i][j] : acc[i][j]);
    }
  }
}

template <typename T>
__global__ void nf4_dequantize_kernel(T* out, nf4::View w, Codes codes) {
  __shared__ float code[16];
  if (threadIdx.x < 16) code[threadIdx.x] = codes.v[threadIdx.x];
  __syncthreads();
  const size_t bytes = static_cast<size_t>(w.rows) * w.cols / 2,
               stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < bytes; i += stride) {
    const int r = static_cast<int>(2 * i / w.cols), c = static_cast<int>(2 * i % w.cols);
    const float a = nf4::view_absmax(w, r, c / nf4::kBlock);
    const uint8_t byte = w.packed[i];
    out[2 * i] = from_f<T>(weight_value<float>(code[byte >> 4], a));
    out[2 * i + 1] = from_f<T>(weight_value<float>(code[byte & 0x0F], a));
  }
}

}  // namespace

template <typename T>
void nf4_matmul_forward(Context& ctx, T* out, int ldo, const T* inp, const nf4::View& w, const T* bias,
                        int N) {
  cpu::check_nf4_view(w, "nf4_matmul_forward (cuda)");
  if (N <= 0 || w.rows == 0) return;
  if (ldo < w.rows)
    throw Error(ExitCode::kInternal, "nf4_matmul_forward (cuda): ldo " + std::to_string(ldo) + " < rows " +
                                         std::to_string(w.rows));
  const dim3 grid((w.rows + kTile - 1) / kTile, (N + kTile - 1) / kTile);
  nf4_forward_kernel<T><<<grid, kThreads, 0, ctx.stream()>>>(out, ldo, inp, w, bias, N, nf4_codes());
  check_launch("nf4_forward_kernel");
}

template <typename T>
void nf4_matmul_backward(Context& ctx, T* dinp, const T* dout, int ldd, const nf4::View& w, int N,
                         bool accumulate) {
  cpu::check_nf4_view(w, "nf4_matmul_backward (cuda)");
  if (N <= 0 || w.cols == 0) return;
  if (ldd < w.rows)
    throw Error(ExitCode::kInternal, "nf4_matmul_backward (cuda): ldd " + std::to_string(ldd) + " < rows " +
                                         std::to_string(w.rows));
  const dim3 grid((w.cols + kTile - 1) / kTile, (N + kTile - 1) / kTile);
  nf4_backward_kernel<T><<<grid, kThreads, 0, ctx.stream()>>>(dinp, dout, ldd, w, N, accumulate, nf4_codes());
  check_launch("nf4_backward_kernel");
}

template <typename T>
void nf4_dequantize(Context& ctx, T* out, const nf4::View& w) {
  cpu::check_nf4_view(w, "nf4_dequantize (cuda)");
  const size_t bytes = static_cast<size_t>(w.rows) * w.cols / 2;
  if (bytes == 0) return;
  nf4_dequantize_kernel<T><<<grid_for(bytes, 256), 256, 0, ctx.stream()>>>(out, w, nf4_codes());
  check_launch("nf4_dequantize_kernel");
}

#define FLOTILLA_NF4(T)                                                                              \
  template void nf4_matmul_forward<T>(Context&, T*, int, const T*, const nf4::View&, const T*, int); \
  template void nf4_matmul_backward<T>(Context&, T*, const T*, int, const nf4::View&, int, bool);    \
  template void nf4_dequantize<T>(Context&, T*, const nf4::View&);
FLOTILLA_NF4(float)
FLOTILLA_NF4(bf16)
#undef FLOTILLA_NF4

}  // namespace flotilla::cuda
