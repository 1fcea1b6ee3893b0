// RMSNorm kernels.
//
// Non-obvious decision: as for LayerNorm, the backward's input gradient is per row (parallel over
// rows) and the weight gradient a column sum in a second pass parallel over channel blocks that
// walks every row in order, so it is race-free and the same bits for any thread count. The
// normalised input is recomputed from (inp, rstd), not stored.
#include "engine/cpu/rmsnorm.h"

#include <cmath>
#include <cstddef>
#include <cstring>

#include "engine/cpu/simd.h"

namespace flotilla::cpu {
namespace {

// One row (or head) of C values at x with stride 1.
inline float row_rstd(const float* x, int C, float eps) {
  float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
  for (int c = 0; c < C; ++c) ss += x[c] * x[c];
  return 1.0f / std::sqrt(ss / static_cast<float>(C) + eps);
}

// dx (+)= (w*d - xhat * mean(w*d*xhat)) * s for one row; returns nothing, writes C values.
inline void row_backward(float* dx, const float* d, const float* x, const float* w, float s, int C,
                         bool add) {
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (int c = 0; c < C; ++c) dot += d[c] * w[c] * x[c] * s;
  const float mean_dot = dot / static_cast<float>(C);
  for (int c = 0; c < C; ++c) {
    const float v = (d[c] * w[c] - x[c] * s * mean_dot) * s;
    dx[c] = add ? dx[c] + v : v;
  }
}

}  // namespace

FLOTILLA_SIMD_CLONES
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, long N, int C,
                     float eps) {
#pragma omp parallel for schedule(static) if (N * C >= kParallelMin)
  for (long r = 0; r < N; ++r) {
    const float* x = inp + static_cast<size_t>(r) * C;
    float* o = out + static_cast<size_t>(r) * C;
    const float s = row_rstd(x, C, eps);
    for (int c = 0; c < C; ++c) o[c] = x[c] * s * weight[c];
    rstd[r] = s;
  }
}

FLOTILLA_SIMD_CLONES
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, long N, int C) {
  constexpr int kBlock = 32;
  const int blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (long r = 0; r < N; ++r) {
      const size_t off = static_cast<size_t>(r) * C;
      row_backward(dinp + off, dout + off, inp + off, weight, rstd[r], C, true);
    }
#pragma omp for schedule(static)
    for (int blk = 0; blk < (dweight != nullptr ? blocks : 0); ++blk) {
      const int c0 = blk * kBlock, c1 = c0 + kBlock < C ? c0 + kBlock : C;
      float dw[kBlock] = {};
      for (long r = 0; r < N; ++r) {
        const size_t off = static_cast<size_t>(r) * C;
        const float s = rstd[r];
        for (int c = c0; c < c1; ++c) dw[c - c0] += dout[off + c] * inp[off + c] * s;
      }
      for (int c = c0; c < c1; ++c) dweight[c] += dw[c - c0];
    }
  }
}

FLOTILLA_SIMD_CLONES
void qk_norm_forward(float* out, float* rstd, const float* inp, const float* qw, const float* kw, long N,
                     int NH, int NKV, int HD, float eps) {
  const int heads = NH + NKV, ld = (NH + 2 * NKV) * HD;
#pragma omp parallel for schedule(static) if (N * ld >= kParallelMin)
  for (long r = 0; r < N; ++r) {
    const float* x = inp + static_cast<size_t>(r) * ld;
    float* o = out + static_cast<size_t>(r) * ld;
    for (int h = 0; h < heads; ++h) {
      const float* w = h < NH ? qw : kw;
      const float* xh = x + static_cast<size_t>(h) * HD;
      float* oh = o + static_cast<size_t>(h) * HD;
      const float s = row_rstd(xh, HD, eps);
      for (int c = 0; c < HD; ++c) oh[c] = xh[c] * s * w[c];
      rstd[static_cast<size_t>(r) * heads + h] = s;
    }
    std::memcpy(o + static_cast<size_t>(heads) * HD, x + static_cast<size_t>(heads) * HD,
                static_cast<size_t>(NKV) * HD * sizeof(float));
  }
}

FLOTILLA_SIMD_CLONES
void qk_norm_backward(float* dinp, float* dqw, float* dkw, const float* dout, const float* inp,
                      const float* qw, const float* kw, const float* rstd, long N, int NH, int NKV, int HD) {
  const int heads = NH + NKV, ld = (NH + 2 * NKV) * HD;
#pragma omp parallel
  {
    // Weight gradients first (dinp may alias dout): one task per (q or k) weight vector, rows and
    // heads in order.
#pragma omp for schedule(static)
    for (int which = 0; which < (dqw != nullptr ? 2 : 0); ++which) {
      float* dw = which == 0 ? dqw : dkw;
      const int h0 = which == 0 ? 0 : NH, h1 = which == 0 ? NH : heads;
      for (long r = 0; r < N; ++r)
        for (int h = h0; h < h1; ++h) {
          const size_t ho = static_cast<size_t>(r) * ld + static_cast<size_t>(h) * HD;
          const float s = rstd[static_cast<size_t>(r) * heads + h];
          for (int c = 0; c < HD; ++c) dw[c] += dout[ho + c] * inp[ho + c] * s;
        }
    }
#pragma omp for schedule(static)
    for (long r = 0; r < N; ++r) {
      const size_t off = static_cast<size_t>(r) * ld;
      for (int h = 0; h < heads; ++h) {
        const size_t ho = off + static_cast<size_t>(h) * HD;
        row_backward(dinp + ho, dout + ho, inp + ho, h < NH ? qw : kw,
                     rstd[static_cast<size_t>(r) * heads + h], HD, false);
      }
      if (dinp != dout)
        std::memcpy(dinp + off + static_cast<size_t>(heads) * HD,
                    dout + off + static_cast<size_t>(heads) * HD,
                    static_cast<size_t>(NKV) * HD * sizeof(float));
    }
  }
}

}  // namespace flotilla::cpu
