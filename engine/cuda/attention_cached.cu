// Attention of new tokens against a KV cache on the GPU (inference; Backend::attention_cached_forward);
// CPU twin: engine/cpu/attention.h. Non-obvious decisions:
// - Two kernels: the new tokens' K/V are scattered into the cache first (one thread per element), so
//   a query may read any new token of its row at or before its position, whatever order the blocks of
//   the second kernel run in.
// - The attention kernel is the training forward's (attention.cu) with keys from the cache: one
//   thread per query row, tiles of cached K/V rows streamed through shared memory, an online softmax;
//   the block's key range ends at the largest position among its queries and each query masks keys
//   past its own position. A decode step (T = 1) is one thread per (row, head): simple rather than
//   fast (no split over the keys); docs/cuda.md says so.
#include <string>

#include "engine/core/error.h"
#include "engine/cuda/attention.h"
#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_check.h"

namespace flotilla::cuda {
namespace {

constexpr int kRows = 64;  // threads per block = query rows per block

template <int HS>
__host__ __device__ constexpr int cached_tile_rows() {
  return HS <= 64 ? 64 : 32;  // two (tile, HS) fp32 tiles within 32 KiB of shared memory
}

struct CacheGeometry {
  int Tn, NH, NKV, row0, max_len;
  size_t ld, ldo, ldc;  // qkv, out and cache row strides
  int B;
};

template <typename T>
__global__ void kv_write_kernel(T* kcache, T* vcache, const T* qkv, const int32_t* pos, size_t total,
                                CacheGeometry g) {
  const size_t idx = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (idx >= total) return;
  const size_t i = idx / g.ldc, c = idx % g.ldc;  // token (b * Tn + t), column within its K (or V)
  const size_t b = i / static_cast<size_t>(g.Tn);
  const size_t at = (static_cast<size_t>(g.row0) + b) * static_cast<size_t>(g.max_len) * g.ldc +
                    static_cast<size_t>(pos[i]) * g.ldc + c;
  const T* src = qkv + i * g.ld + static_cast<size_t>(g.NH) * (g.ldc / g.NKV);
  kcache[at] = src[c];
  vcache[at] = src[g.ldc + c];
}

template <typename T, int HS>
__global__ void __launch_bounds__(kRows)
    attention_cached_kernel(T* out, const T* qkv, const T* kcache, const T* vcache, const int32_t* pos,
                            CacheGeometry g, float scale) {
  constexpr int BC = cached_tile_rows<HS>();
  __shared__ float ks[BC][HS];
  __shared__ float vs[BC][HS];
  __shared__ int last_s[kRows + 1];
  // (row, head) pairs in y and z: y alone stops at 65535 (a large scoring batch passes it)
  const long pair = static_cast<long>(blockIdx.z) * gridDim.y + blockIdx.y;
  if (pair >= static_cast<long>(g.B) * g.NH) return;  // the whole block
  const int b = static_cast<int>(pair / g.NH), h = static_cast<int>(pair % g.NH), kv = h / (g.NH / g.NKV);
  const int q0 = blockIdx.x * kRows;
  const int i = q0 + threadIdx.x;
  const int Tn = g.Tn;
  const T* qb = qkv + static_cast<size_t>(b) * Tn * g.ld + static_cast<size_t>(h) * HS;
  const size_t crow = (static_cast<size_t>(g.row0) + b) * static_cast<size_t>(g.max_len) * g.ldc +
                      static_cast<size_t>(kv) * HS;
  const T* kb = kcache + crow;
  const T* vb = vcache + crow;
  const int my = i < Tn ? pos[static_cast<size_t>(b) * Tn + i] : -1;  // last key this query sees
  // The largest position in the block: where its key loop ends.
  last_s[threadIdx.x] = my;
  __syncthreads();
  if (threadIdx.x == 0) {
    int m = -1;
    for (int r = 0; r < kRows; ++r) m = max(m, last_s[r]);
    last_s[kRows] = m;
  }
  __syncthreads();
  const int last = last_s[kRows];
  float q[HS], o[HS];
  if (i < Tn) {
#pragma unroll
    for (int d = 0; d < HS; ++d) q[d] = to_f(qb[static_cast<size_t>(i) * g.ld + d]) * scale;
  }
#pragma unroll
  for (int d = 0; d < HS; ++d) o[d] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int j0 = 0; j0 <= last; j0 += BC) {
    for (int idx = threadIdx.x; idx < BC * HS; idx += kRows) {
      const int r = idx / HS, d = idx % HS, j = j0 + r;
      ks[r][d] = j <= last ? to_f(kb[static_cast<size_t>(j) * g.ldc + d]) : 0.0f;
      vs[r][d] = j <= last ? to_f(vb[static_cast<size_t>(j) * g.ldc + d]) : 0.0f;
    }
    __syncthreads();
    if (my >= j0) {
      const int rend = min(BC, my - j0 + 1);
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
    T* y = out + (static_cast<size_t>(b) * Tn + i) * g.ldo + static_cast<size_t>(h) * HS;
#pragma unroll
    for (int d = 0; d < HS; ++d) y[d] = from_f<T>(o[d] * inv);
  }
}

template <typename T, int HS>
void cached_hs(Context& ctx, T* out, const T* qkv, const T* kcache, const T* vcache, const int32_t* pos,
               int B, const CacheGeometry& g) {
  const long pairs = static_cast<long>(B) * g.NH, y = pairs < 65535 ? pairs : 65535;
  const dim3 grid(static_cast<unsigned>((g.Tn + kRows - 1) / kRows), static_cast<unsigned>(y),
                  static_cast<unsigned>((pairs + y - 1) / y));
  attention_cached_kernel<T, HS><<<grid, kRows, 0, ctx.stream()>>>(out, qkv, kcache, vcache, pos, g,
                                                                   1.0f / sqrtf(static_cast<float>(HS)));
  check_launch("attention_cached_forward");
}

}  // namespace

template <typename T>
void attention_cached_forward(Context& ctx, T* out, const T* qkv, T* kcache, T* vcache, const int32_t* pos,
                              int row0, int B, int Tn, int NH, int NKV, int HD, int max_len) {
  if (B == 0 || Tn == 0) return;
  if (NH < 1 || NKV < 1 || NH % NKV != 0 || (HD != 8 && HD != 16 && HD != 32 && HD != 64 && HD != 128))
    throw Error(ExitCode::kConfig, "CUDA cached attention: n_head " + std::to_string(NH) + ", n_kv_head " +
                                       std::to_string(NKV) + ", head size " + std::to_string(HD) +
                                       " (head sizes 8, 16, 32, 64 and 128; n_kv_head dividing n_head)");
  const CacheGeometry g{Tn,
                        NH,
                        NKV,
                        row0,
                        max_len,
                        static_cast<size_t>(NH + 2 * NKV) * HD,
                        static_cast<size_t>(NH) * HD,
                        static_cast<size_t>(NKV) * HD,
                        B};
  const size_t total = static_cast<size_t>(B) * Tn * g.ldc;
  kv_write_kernel<T><<<static_cast<unsigned>((total + 255) / 256), 256, 0, ctx.stream()>>>(
      kcache, vcache, qkv, pos, total, g);
  check_launch("attention_cached_forward (cache write)");
  switch (HD) {
    case 8:
      return cached_hs<T, 8>(ctx, out, qkv, kcache, vcache, pos, B, g);
    case 16:
      return cached_hs<T, 16>(ctx, out, qkv, kcache, vcache, pos, B, g);
    case 32:
      return cached_hs<T, 32>(ctx, out, qkv, kcache, vcache, pos, B, g);
    case 64:
      return cached_hs<T, 64>(ctx, out, qkv, kcache, vcache, pos, B, g);
    default:
      return cached_hs<T, 128>(ctx, out, qkv, kcache, vcache, pos, B, g);
  }
}

template void attention_cached_forward<float>(Context&, float*, const float*, float*, float*, const int32_t*,
                                              int, int, int, int, int, int, int);
template void attention_cached_forward<bf16>(Context&, bf16*, const bf16*, bf16*, bf16*, const int32_t*, int,
                                             int, int, int, int, int, int);

}  // namespace flotilla::cuda
