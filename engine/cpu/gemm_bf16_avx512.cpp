// The AVX512_BF16 GEMM of gemm_bf16_avx512.h: GotoBLAS loops (NC columns of B, KC deep, packed
// in k-pairs; MC rows of A packed per block) around a 12 x 32 vdpbf16ps register tile.
#include "engine/cpu/gemm_bf16_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace flotilla::cpu {
namespace {

constexpr int kMR = 12, kNR = 32;  // the register tile: 24 zmm accumulators
// B micro-panel KC x NR <= 20 KiB (L1), A block MC x KC <= 90 KiB and B block KC x NC <= 480 KiB
// (together within Zen 4's 1 MiB L2, so B is not re-read from L3 for every MC block); K is cut into
// equal even blocks of at most kKC (576 = 2 x 288, not 320 + 256: fewer C round trips).
constexpr int kKC = 320, kMC = 144, kNC = 768;

// One k-pair of two bf16 as the dword vdpbf16ps reads: the lower k in the low half.
inline uint32_t pair(bf16_t lo, bf16_t hi) {
  return static_cast<uint32_t>(lo.bits) | static_cast<uint32_t>(hi.bits) << 16;
}

constexpr bf16_t kZero{0};

// B's rows [k0, k0+kc) and columns [n0, n0+nc) into panels of kNR columns: panel j holds, per pair
// p, kNR dwords (columns), zero beyond N and K.
void pack_b(bool tb, const bf16_t* B, int ldb, int k0, int kc, int n0, int nc, uint32_t* out) {
  const int kp = (kc + 1) / 2;
  for (int j = 0; j < nc; j += kNR) {
    uint32_t* panel = out + static_cast<size_t>(j / kNR) * kp * kNR;
    const int nr = std::min(kNR, nc - j);
    if (tb) {  // B[n * ldb + k]: a column's pairs are adjacent
      for (int n = 0; n < kNR; ++n) {
        if (n >= nr) {
          for (int p = 0; p < kp; ++p) panel[p * kNR + n] = 0;
          continue;
        }
        const bf16_t* col = B + static_cast<size_t>(n0 + j + n) * ldb + k0;
        int p = 0;
        for (; 2 * p + 1 < kc; ++p) {
          uint32_t v;
          std::memcpy(&v, col + 2 * p, 4);
          panel[p * kNR + n] = v;
        }
        if (p < kp) panel[p * kNR + n] = pair(col[2 * p], kZero);
      }
    } else {  // B[k * ldb + n]: interleave two rows
      for (int p = 0; p < kp; ++p) {
        const bf16_t* r0 = B + static_cast<size_t>(k0 + 2 * p) * ldb + n0 + j;
        const bf16_t* r1 = 2 * p + 1 < kc ? r0 + ldb : nullptr;
        uint32_t* dst = panel + p * kNR;
        for (int n = 0; n < nr; ++n) dst[n] = pair(r0[n], r1 != nullptr ? r1[n] : kZero);
        for (int n = nr; n < kNR; ++n) dst[n] = 0;
      }
    }
  }
}

// A's rows [m0, m0+mc) and k [k0, k0+kc) into panels of kMR rows: panel i holds, per pair p, kMR
// dwords (rows), zero beyond M and K.
void pack_a(bool ta, const bf16_t* A, int lda, int m0, int mc, int k0, int kc, uint32_t* out) {
  const int kp = (kc + 1) / 2;
  for (int i = 0; i < mc; i += kMR) {
    uint32_t* panel = out + static_cast<size_t>(i / kMR) * kp * kMR;
    const int mr = std::min(kMR, mc - i);
    if (!ta) {  // A[m * lda + k]: a row's pairs are adjacent
      for (int r = 0; r < kMR; ++r) {
        if (r >= mr) {
          for (int p = 0; p < kp; ++p) panel[p * kMR + r] = 0;
          continue;
        }
        const bf16_t* row = A + static_cast<size_t>(m0 + i + r) * lda + k0;
        int p = 0;
        for (; 2 * p + 1 < kc; ++p) {
          uint32_t v;
          std::memcpy(&v, row + 2 * p, 4);
          panel[p * kMR + r] = v;
        }
        if (p < kp) panel[p * kMR + r] = pair(row[2 * p], kZero);
      }
    } else {  // A[k * lda + m]
      for (int p = 0; p < kp; ++p) {
        const bf16_t* r0 = A + static_cast<size_t>(k0 + 2 * p) * lda + m0 + i;
        const bf16_t* r1 = 2 * p + 1 < kc ? r0 + lda : nullptr;
        uint32_t* dst = panel + p * kMR;
        for (int r = 0; r < mr; ++r) dst[r] = pair(r0[r], r1 != nullptr ? r1[r] : kZero);
        for (int r = mr; r < kMR; ++r) dst[r] = 0;
      }
    }
  }
}

// The kMR x kNR tile: C[0..mr) x [0..nr) = (accumulate ? C : 0) + Ap . Bp over kp pairs.
__attribute__((target("avx512f,avx512bf16,avx512vl,avx512bw"))) void micro_kernel(int kp, const uint32_t* Ap,
                                                                                  const uint32_t* Bp,
                                                                                  float* C, int ldc, int mr,
                                                                                  int nr, bool accumulate) {
  constexpr int kNV = kNR / 16;
  __m512 acc[kMR][kNV];
  for (int r = 0; r < kMR; ++r)
    for (int v = 0; v < kNV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int p = 0; p < kp; ++p) {
    __m512bh b[kNV];
    for (int v = 0; v < kNV; ++v) b[v] = (__m512bh)_mm512_loadu_si512(Bp + p * kNR + 16 * v);
    const uint32_t* a = Ap + p * kMR;
#pragma GCC unroll 16
    for (int r = 0; r < kMR; ++r) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[r]));
      for (int v = 0; v < kNV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, b[v]);
    }
  }
  __mmask16 mask[kNV];
  for (int v = 0; v < kNV; ++v) {
    const int left = nr - 16 * v;
    mask[v] = left >= 16 ? 0xffff : left <= 0 ? 0 : static_cast<__mmask16>((1u << left) - 1);
  }
  for (int r = 0; r < mr; ++r) {
    float* c = C + static_cast<size_t>(r) * ldc;
    for (int v = 0; v < kNV; ++v) {
      __m512 x = acc[r][v];
      if (accumulate) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mask[v], c + 16 * v));
      _mm512_mask_storeu_ps(c + 16 * v, mask[v], x);
    }
  }
}

struct PackBuffers {
  std::vector<uint32_t> a, b;
};

}  // namespace

void gemm_bf16_avx512(bool trans_a, bool trans_b, int M, int N, int K, const bf16_t* A, int lda,
                      const bf16_t* B, int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (beta == 0.0f)
      for (int m = 0; m < M; ++m)
        std::fill(C + static_cast<size_t>(m) * ldc, C + static_cast<size_t>(m) * ldc + N, 0.0f);
    return;
  }
  const int blocks = (K + kKC - 1) / kKC;
  const int kc_even = ((K + blocks - 1) / blocks + 1) / 2 * 2;  // <= kKC, even: pairs never straddle
  thread_local PackBuffers buf;
  const size_t kp_max = static_cast<size_t>(kc_even / 2);
  buf.b.resize(kp_max * static_cast<size_t>((std::min(N, kNC) + kNR - 1) / kNR) * kNR);
  buf.a.resize(kp_max * static_cast<size_t>((std::min(M, kMC) + kMR - 1) / kMR) * kMR);
  for (int n0 = 0; n0 < N; n0 += kNC) {
    const int nc = std::min(kNC, N - n0);
    for (int k0 = 0; k0 < K; k0 += kc_even) {
      const int kc = std::min(kc_even, K - k0), kp = (kc + 1) / 2;
      const bool accumulate = k0 > 0 || beta != 0.0f;
      pack_b(trans_b, B, ldb, k0, kc, n0, nc, buf.b.data());
      for (int m0 = 0; m0 < M; m0 += kMC) {
        const int mc = std::min(kMC, M - m0);
        pack_a(trans_a, A, lda, m0, mc, k0, kc, buf.a.data());
        for (int j = 0; j < nc; j += kNR) {
          const uint32_t* bp = buf.b.data() + static_cast<size_t>(j / kNR) * kp * kNR;
          for (int i = 0; i < mc; i += kMR)
            micro_kernel(kp, buf.a.data() + static_cast<size_t>(i / kMR) * kp * kMR, bp,
                         C + static_cast<size_t>(m0 + i) * ldc + n0 + j, ldc, std::min(kMR, mc - i),
                         std::min(kNR, nc - j), accumulate);
        }
      }
    }
  }
}

}  // namespace flotilla::cpu
