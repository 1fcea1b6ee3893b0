// NF4 matmuls: per-thread dequantised tiles of W multiplied with the engine's GEMMs (nf4_matmul.h
// says why tiles and how the work is split).
#include "engine/cpu/nf4_matmul.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/cpu/blas.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/matmul_bf16.h"
#include "engine/cpu/onednn.h"
#include "engine/cpu/simd.h"

namespace flotilla::cpu {
namespace {

// One thread's dequantised tile: its size, and the depth (along the reduction) it keeps before it
// grows in width (W rows forward, columns backward); measured on a Sapphire Rapids core against
// 2048 tokens (nf4_matmul.h). OpenBLAS's sgemm wants width (it repacks the activations once per
// call: 256 wide lost 15% against 1024) and is indifferent to depth; oneDNN's AMX bf16 gemm
// wants depth (each cut of it re-reads and re-writes the fp32 output block: 12% lost at 1024
// deep) and width as well (2048 x 288 x 576 ran 13% slower than 2048 x 576 x 576).
template <typename T>
struct TileShape;
template <>
struct TileShape<float> {
  static constexpr size_t kBytes = size_t{1} << 20;  // 1 MiB: half of this L2; 1024 wide x 256
  static constexpr int kDepth = 256;
};
template <>
struct TileShape<bf16_t> {
  static constexpr size_t kBytes = size_t{2} << 20;  // 2 MiB: 512 wide x 2048, or all of a shallow W
  static constexpr int kDepth = 2048;
};
constexpr size_t kTileBufferBytes = TileShape<bf16_t>::kBytes;

// ---- dequantisation of one row segment: nb blocks of 64 codes (32 bytes each), absmax per block ----

void row_scalar(float* dst, const uint8_t* p, const float* am, int nb) {
  for (int b = 0; b < nb; ++b)
    for (int i = 0; i < 32; ++i) {
      const uint8_t byte = p[b * 32 + i];
      dst[b * 64 + 2 * i] = nf4::kCode[byte >> 4] * am[b];
      dst[b * 64 + 2 * i + 1] = nf4::kCode[byte & 0x0F] * am[b];
    }
}

void row_scalar(bf16_t* dst, const uint8_t* p, const float* am, int nb) {
  for (int b = 0; b < nb; ++b)
    for (int i = 0; i < 32; ++i) {
      const uint8_t byte = p[b * 32 + i];
      dst[b * 64 + 2 * i] = to_bf16(nf4::kCode[byte >> 4] * am[b]);
      dst[b * 64 + 2 * i + 1] = to_bf16(nf4::kCode[byte & 0x0F] * am[b]);
    }
}

// GCC 12's AVX-512 headers build unmasked results on _mm512_undefined_*(), a self-initialised
// variable that -Wmaybe-uninitialized reports at -O3 (a false positive in the headers).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// The block's 16 possible values (code * absmax, each one fp32 multiply as bitsandbytes rounds it)
// sit in one register; 16 bytes widen to 16 lanes, whose high nibbles (vpermps reads only the low
// four bits of an index, so the low nibble needs no mask) look up the even and odd elements, and
// two two-source permutes interleave them.
__attribute__((target("avx512f"))) void row_avx512(float* dst, const uint8_t* p, const float* am, int nb) {
  const __m512 code = _mm512_loadu_ps(nf4::kCode);
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  for (int b = 0; b < nb; ++b) {
    const __m512 t = _mm512_mul_ps(code, _mm512_set1_ps(am[b]));
    for (int h = 0; h < 2; ++h) {
      const __m512i x =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + b * 32 + h * 16)));
      const __m512 even = _mm512_permutexvar_ps(_mm512_srli_epi32(x, 4), t);
      const __m512 odd = _mm512_permutexvar_ps(x, t);
      _mm512_storeu_ps(dst + b * 64 + h * 32, _mm512_permutex2var_ps(even, lo, odd));
      _mm512_storeu_ps(dst + b * 64 + h * 32 + 16, _mm512_permutex2var_ps(even, hi, odd));
    }
  }
}

// bf16: the 16 values are rounded to bf16 once per block (integer round to nearest even, bit for
// bit to_bf16 for finite values, denormals included), and each 32-bit lane of widened bytes
// becomes the two 16-bit indices of its elements in order, looked up with one vpermw.
__attribute__((target("avx512f,avx512bw"))) void row_avx512(bf16_t* dst, const uint8_t* p, const float* am,
                                                            int nb) {
  const __m512 code = _mm512_loadu_ps(nf4::kCode);
  const __m512i one = _mm512_set1_epi32(1), half = _mm512_set1_epi32(0x7fff), nib = _mm512_set1_epi32(0x0F);
  for (int b = 0; b < nb; ++b) {
    __m512i u = _mm512_castps_si512(_mm512_mul_ps(code, _mm512_set1_ps(am[b])));
    u = _mm512_add_epi32(u, _mm512_add_epi32(half, _mm512_and_si512(_mm512_srli_epi32(u, 16), one)));
    const __m512i t = _mm512_zextsi256_si512(_mm512_cvtepi32_epi16(_mm512_srli_epi32(u, 16)));
    for (int h = 0; h < 2; ++h) {
      const __m512i x =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + b * 32 + h * 16)));
      const __m512i idx =
          _mm512_or_si512(_mm512_srli_epi32(x, 4), _mm512_slli_epi32(_mm512_and_si512(x, nib), 16));
      _mm512_storeu_si512(dst + b * 64 + h * 32, _mm512_permutexvar_epi16(idx, t));
    }
  }
}

// AVX2: two 8-entry halves of the table, the index's bit 3 choosing between them.
__attribute__((target("avx2"))) inline __m256 lookup_avx2(__m256 t0, __m256 t1, __m256i i) {
  return _mm256_blendv_ps(_mm256_permutevar8x32_ps(t0, i), _mm256_permutevar8x32_ps(t1, i),
                          _mm256_castsi256_ps(_mm256_slli_epi32(i, 28)));
}

__attribute__((target("avx2"))) void row_avx2(float* dst, const uint8_t* p, const float* am, int nb) {
  const __m256 c0 = _mm256_loadu_ps(nf4::kCode), c1 = _mm256_loadu_ps(nf4::kCode + 8);
  const __m256i nib = _mm256_set1_epi32(0x0F);
  for (int b = 0; b < nb; ++b) {
    const __m256 a = _mm256_set1_ps(am[b]);
    const __m256 t0 = _mm256_mul_ps(c0, a), t1 = _mm256_mul_ps(c1, a);
    for (int q = 0; q < 4; ++q) {
      const __m256i x =
          _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + b * 32 + q * 8)));
      const __m256 even = lookup_avx2(t0, t1, _mm256_srli_epi32(x, 4));
      const __m256 odd = lookup_avx2(t0, t1, _mm256_and_si256(x, nib));
      const __m256 l = _mm256_unpacklo_ps(even, odd), h = _mm256_unpackhi_ps(even, odd);
      _mm256_storeu_ps(dst + b * 64 + q * 16, _mm256_permute2f128_ps(l, h, 0x20));
      _mm256_storeu_ps(dst + b * 64 + q * 16 + 8, _mm256_permute2f128_ps(l, h, 0x31));
    }
  }
}

// One row to bf16 on the calling thread, as round_to_bf16 rounds (vcvtneps2bf16 where the CPU has
// AVX512_BF16, else to_bf16): the strided dout of a fused projection cannot take the threaded call.
__attribute__((target("avx512f,avx512bf16,avx512vl"))) void round_row_avx512_bf16(bf16_t* out,
                                                                                  const float* in, int n) {
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(in + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), reinterpret_cast<const __m256i&>(h));
  }
  for (; i < n; ++i) out[i] = to_bf16(in[i]);
}

#pragma GCC diagnostic pop

void round_row_bf16(bf16_t* out, const float* in, int n) {
  static const bool native = cpu_features().avx512_bf16 && cpu_features().os_avx512;
  if (native) return round_row_avx512_bf16(out, in, n);
  for (int i = 0; i < n; ++i) out[i] = to_bf16(in[i]);
}

enum class Isa { kScalar, kAvx2, kAvx512 };

Isa dequant_isa() {
  static const Isa isa = [] {
    const KernelPath p = blas_info().choice.fp32;  // FLOTILLA_CPU_PATH narrows it
    const CpuFeatures& f = cpu_features();
    if (p != KernelPath::kSse && p != KernelPath::kAvx2 && f.avx512f && f.avx512bw && f.os_avx512)
      return Isa::kAvx512;
    if (p != KernelPath::kSse && f.avx2 && f.os_avx) return Isa::kAvx2;
    return Isa::kScalar;
  }();
  return isa;
}

void dequant_row(float* dst, const uint8_t* p, const float* am, int nb) {
  switch (dequant_isa()) {
    case Isa::kAvx512:
      return row_avx512(dst, p, am, nb);
    case Isa::kAvx2:
      return row_avx2(dst, p, am, nb);
    case Isa::kScalar:
      return row_scalar(dst, p, am, nb);
  }
}

void dequant_row(bf16_t* dst, const uint8_t* p, const float* am, int nb) {
  if (dequant_isa() == Isa::kAvx512) return row_avx512(dst, p, am, nb);
  row_scalar(dst, p, am, nb);
}

template <typename T>
void dequant_tile(T* dst, int ld, const nf4::View& w, int r0, int r1, int c0, int c1) {
  constexpr int kChunk = 64;  // blocks whose absmax is computed ahead of their codes
  float am[kChunk];
  const int nb = (c1 - c0) / nf4::kBlock, cb0 = c0 / nf4::kBlock;
  for (int r = r0; r < r1; ++r) {
    const uint8_t* p = w.packed + (static_cast<int64_t>(r) * w.cols + c0) / 2;
    T* d = dst + static_cast<size_t>(r - r0) * ld;
    for (int b0 = 0; b0 < nb; b0 += kChunk) {
      const int n = std::min(kChunk, nb - b0);
      for (int j = 0; j < n; ++j) am[j] = nf4::view_absmax(w, r, cb0 + b0 + j);
      dequant_row(d + b0 * nf4::kBlock, p + b0 * (nf4::kBlock / 2), am, n);
    }
  }
}

// ---- the work split ----

// The items: `pa` ranges of W's split dimension (rows forward, columns backward) times `pn` ranges
// of the token rows; the i-th item's ranges come from thread_range, so they are a function of the
// shape and of pa/pn only.
struct Grid {
  int pa = 1, pn = 1;
};

// Chooses pa x pn <= slots items (they run one per slot at once) for the least time of the
// largest: its GEMM flops over the GEMM's efficiency at that width and height, plus its
// dequantisation (each token range dequantises its W range again). A model fitted to one
// Sapphire Rapids core: a GEMM `a` W rows/columns wide runs at a / (a + 96) of its best (AMX
// bf16 2048 x a x 576: 653, 796, 912 GFLOP/s at a = 144, 288, 576; the fp32 sgemm alike), `m`
// tokens high at m / (m + 32); one dequantised value costs as much time as 31 GEMM flops (fp32:
// 5.6 G values/s against 175 GFLOP/s) or 74 (bf16: 12.8 G/s against 950). So a small weight is
// shared by token ranges (576 x 576 on 2 threads: each dequantises all of W, a 4% cost, and
// multiplies it full width, 13% faster than half each) and a large one by W ranges. Slots are the
// threads, or 16 in deterministic mode, where the items must depend on the shape alone (16 share
// out evenly over 1, 2, 4, 8 or 16 threads).
Grid split(int extent, int align, int N, int K, bool bf16) {
  const long units = (extent + align - 1) / align, nunits = (N + 15) / 16;
  const int slots = thread_independent_gemm() ? 16 : std::max(1, omp_get_max_threads());
  const double dequant_flops = bf16 ? 74.0 : 31.0;
  Grid best;
  double best_cost = 0;
  for (int pa = 1; pa <= std::min<long>(units, slots); ++pa) {
    const int pn = static_cast<int>(std::max(1L, std::min<long>(slots / pa, nunits)));
    const double a = static_cast<double>(std::min<long>((units + pa - 1) / pa * align, extent));
    const double m = static_cast<double>(std::min<long>((nunits + pn - 1) / pn * 16, N));
    const double cost = 2.0 * m * a * K / (a / (a + 96.0) * (m / (m + 32.0))) + a * K * dequant_flops;
    if (pa == 1 || cost < best_cost * 0.999 || (cost <= best_cost * 1.001 && pn < best.pn))
      best = {pa, pn}, best_cost = cost;
  }
  return best;
}

template <typename F>
void for_each_item(const Grid& g, int extent, int align, int N, F&& fn) {
  const int items = g.pa * g.pn;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < items; ++i) {
    long a0 = 0, a1 = 0, n0 = 0, n1 = 0;
    thread_range(extent, i / g.pn, g.pa, align, &a0, &a1);
    thread_range(N, i % g.pn, g.pn, 16, &n0, &n1);
    if (a1 > a0 && n1 > n0)
      fn(static_cast<int>(a0), static_cast<int>(a1), static_cast<int>(n0), static_cast<int>(n1));
  }
}

// This thread's tile buffer (kept for the thread's life; OpenMP reuses its threads).
void* tile_buffer() {
  struct Buffer {
    void* p = nullptr;
    ~Buffer() { std::free(p); }
  };
  static thread_local Buffer buf;
  if (buf.p == nullptr) {
    buf.p = std::aligned_alloc(64, kTileBufferBytes);
    if (buf.p == nullptr) throw std::bad_alloc();
  }
  return buf.p;
}

// The bf16-rounded activation operand of the call in progress, per calling thread (so two callers
// on two threads do not share it); it only grows.
std::vector<bf16_t>& activation_scratch() {
  static thread_local std::vector<bf16_t> x;
  return x;
}

template <typename T>
void forward_item(float* out, int ldo, const float* inp, const T* x, const nf4::View& w, const float* bias,
                  int r0, int r1, int n0, int n1) {
  constexpr int kElems = static_cast<int>(TileShape<T>::kBytes / sizeof(T));
  T* tile = static_cast<T*>(tile_buffer());
  // As wide as the tile allows at the kept depth (a multiple of 16, so no piece below exceeds it).
  const int cols = w.cols, nrows = r1 - r0, wide = kElems / std::min(cols, TileShape<T>::kDepth) / 16 * 16,
            tiles = (nrows + wide - 1) / wide;
  for (int j = 0; j < tiles; ++j) {
    long b = 0, e = 0;
    thread_range(nrows, j, tiles, 16, &b, &e);
    const int t0 = r0 + static_cast<int>(b), nr = static_cast<int>(e - b);
    if (nr <= 0) continue;
    const int kt = std::min(cols, std::max(nf4::kBlock, kElems / nr / nf4::kBlock * nf4::kBlock));
    for (int k0 = 0; k0 < cols; k0 += kt) {
      const int k1 = std::min(cols, k0 + kt);
      dequant_tile(tile, k1 - k0, w, t0, t0 + nr, k0, k1);
      float* c = out + static_cast<size_t>(n0) * ldo + t0;
      const float beta = k0 == 0 ? 0.0f : 1.0f;
      if constexpr (sizeof(T) == 2)
        onednn_gemm_bf16(false, true, n1 - n0, nr, k1 - k0, x + static_cast<size_t>(n0) * cols + k0, cols,
                         tile, k1 - k0, beta, c, ldo);
      else
        gemm_serial(false, true, n1 - n0, nr, k1 - k0, 1.0f, inp + static_cast<size_t>(n0) * cols + k0, cols,
                    tile, k1 - k0, beta, c, ldo);
    }
    if (bias != nullptr)  // the epilogue, while the tile's outputs are still in cache
      for (int n = n0; n < n1; ++n) {
        float* o = out + static_cast<size_t>(n) * ldo + t0;
        for (int r = 0; r < nr; ++r) o[r] += bias[t0 + r];
      }
  }
}

template <typename T>
void backward_item(float* dinp, const float* dout, int ldd, const T* d, const nf4::View& w, bool accumulate,
                   int c0, int c1, int n0, int n1) {
  constexpr int kElems = static_cast<int>(TileShape<T>::kBytes / sizeof(T));
  T* tile = static_cast<T*>(tile_buffer());
  const int rows = w.rows, cols = w.cols, ncols = c1 - c0,
            wide = std::max(nf4::kBlock, kElems / std::max(16, std::min(rows, TileShape<T>::kDepth)) /
                                             nf4::kBlock * nf4::kBlock),
            tiles = (ncols + wide - 1) / wide;
  for (int j = 0; j < tiles; ++j) {
    long b = 0, e = 0;
    thread_range(ncols, j, tiles, nf4::kBlock, &b, &e);
    const int t0 = c0 + static_cast<int>(b), nc = static_cast<int>(e - b);
    if (nc <= 0) continue;
    const int kr = std::min(rows, std::max(16, kElems / nc / 16 * 16));
    float* c = dinp + static_cast<size_t>(n0) * cols + t0;
    if (rows == 0 && !accumulate)
      for (int n = n0; n < n1; ++n) std::fill_n(dinp + static_cast<size_t>(n) * cols + t0, nc, 0.0f);
    for (int k0 = 0; k0 < rows; k0 += kr) {
      const int k1 = std::min(rows, k0 + kr);
      dequant_tile(tile, nc, w, k0, k1, t0, t0 + nc);
      const float beta = k0 == 0 && !accumulate ? 0.0f : 1.0f;
      if constexpr (sizeof(T) == 2)
        onednn_gemm_bf16(false, false, n1 - n0, nc, k1 - k0, d + static_cast<size_t>(n0) * rows + k0, rows,
                         tile, nc, beta, c, cols);
      else
        gemm_serial(false, false, n1 - n0, nc, k1 - k0, 1.0f, dout + static_cast<size_t>(n0) * ldd + k0, ldd,
                    tile, nc, beta, c, cols);
    }
  }
}

// A throw inside the threads would terminate: refuse before them.
void require_bf16(const char* who) {
  const std::string why = bf16_matmul_refusal();
  if (!why.empty()) throw Error(ExitCode::kConfig, std::string(who) + ": " + why);
}

}  // namespace

void check_nf4_view(const nf4::View& w, const char* who) {
  auto fail = [&](const std::string& why) {
    throw Error(ExitCode::kInternal, std::string(who) + ": invalid NF4 view (" + std::to_string(w.rows) +
                                         " x " + std::to_string(w.cols) + "): " + why);
  };
  if (w.rows < 0 || w.cols < 0 || w.cols % nf4::kBlock != 0)
    fail("cols must be a non-negative multiple of 64");
  if (w.rows == 0 || w.cols == 0) return;
  if (w.packed == nullptr) fail("no packed codes");
  if (w.absmax_q != nullptr) {
    if (w.absmax2 == nullptr || w.code2 == nullptr) fail("double quantisation without absmax2 or code2");
    if (w.row0 < 0 || w.cb0 < 0 || w.cb0 + w.cols / nf4::kBlock > w.module_cblocks)
      fail("column blocks " + std::to_string(w.cb0) + " + " + std::to_string(w.cols / nf4::kBlock) +
           " beyond the module's " + std::to_string(w.module_cblocks));
  } else if (w.absmax == nullptr) {
    fail("neither absmax nor absmax_q");
  }
}

void nf4_dequantize_tile(float* dst, int ld, const nf4::View& w, int r0, int r1, int c0, int c1) {
  dequant_tile(dst, ld, w, r0, r1, c0, c1);
}
void nf4_dequantize_tile(bf16_t* dst, int ld, const nf4::View& w, int r0, int r1, int c0, int c1) {
  dequant_tile(dst, ld, w, r0, r1, c0, c1);
}

const char* nf4_dequant_path() {
  switch (dequant_isa()) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kScalar:
      break;
  }
  return "scalar";
}

void nf4_dequantize(float* out, const nf4::View& w) {
  check_nf4_view(w, "nf4_dequantize");
  const int chunks = (w.rows + 15) / 16;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < chunks; ++i)
    dequant_tile(out + static_cast<size_t>(i) * 16 * w.cols, w.cols, w, i * 16, std::min(w.rows, i * 16 + 16),
                 0, w.cols);
}

void nf4_matmul_forward(float* out, int ldo, const float* inp, const nf4::View& w, const float* bias, int N,
                        bool bf16) {
  check_nf4_view(w, "nf4_matmul_forward");
  if (N <= 0 || w.rows == 0) return;
  if (ldo < w.rows)
    throw Error(ExitCode::kInternal,
                "nf4_matmul_forward: ldo " + std::to_string(ldo) + " < rows " + std::to_string(w.rows));
  if (w.cols == 0) {  // an empty reduction: the bias alone
    for (int n = 0; n < N; ++n)
      for (int r = 0; r < w.rows; ++r) out[static_cast<size_t>(n) * ldo + r] = bias ? bias[r] : 0.0f;
    return;
  }
  blas_single_thread();
  const Grid g = split(w.rows, 16, N, w.cols, bf16);
  if (bf16) {
    require_bf16("nf4_matmul_forward");
    std::vector<bf16_t>& x = activation_scratch();
    const size_t n = static_cast<size_t>(N) * w.cols;
    if (x.size() < n) x.resize(n);
    round_to_bf16(x.data(), inp, n);
    for_each_item(g, w.rows, 16, N, [&](int r0, int r1, int n0, int n1) {
      forward_item<bf16_t>(out, ldo, inp, x.data(), w, bias, r0, r1, n0, n1);
    });
    return;
  }
  for_each_item(g, w.rows, 16, N, [&](int r0, int r1, int n0, int n1) {
    forward_item<float>(out, ldo, inp, nullptr, w, bias, r0, r1, n0, n1);
  });
}

void nf4_matmul_backward(float* dinp, const float* dout, int ldd, const nf4::View& w, int N, bool accumulate,
                         bool bf16) {
  check_nf4_view(w, "nf4_matmul_backward");
  if (N <= 0 || w.cols == 0) return;
  if (ldd < w.rows)
    throw Error(ExitCode::kInternal,
                "nf4_matmul_backward: ldd " + std::to_string(ldd) + " < rows " + std::to_string(w.rows));
  blas_single_thread();
  const Grid g = split(w.cols, nf4::kBlock, N, w.rows, bf16);
  if (bf16 && w.rows > 0) {
    require_bf16("nf4_matmul_backward");
    std::vector<bf16_t>& d = activation_scratch();
    const size_t n = static_cast<size_t>(N) * w.rows;
    if (d.size() < n) d.resize(n);
    if (ldd == w.rows) {
      round_to_bf16(d.data(), dout, n);
    } else {  // a module's columns of a fused gradient: row by row, rounded as round_to_bf16 rounds
#pragma omp parallel for schedule(static)
      for (int i = 0; i < N; ++i)
        round_row_bf16(d.data() + static_cast<size_t>(i) * w.rows, dout + static_cast<size_t>(i) * ldd,
                       w.rows);
    }
    for_each_item(g, w.cols, nf4::kBlock, N, [&](int c0, int c1, int n0, int n1) {
      backward_item<bf16_t>(dinp, dout, ldd, d.data(), w, accumulate, c0, c1, n0, n1);
    });
    return;
  }
  for_each_item(g, w.cols, nf4::kBlock, N, [&](int c0, int c1, int n0, int n1) {
    backward_item<float>(dinp, dout, ldd, nullptr, w, accumulate, c0, c1, n0, n1);
  });
}

}  // namespace flotilla::cpu
