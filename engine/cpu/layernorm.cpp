// LayerNorm kernels.
//
// Non-obvious decision: the backward runs in two passes. The input gradient is per row (parallel
// over rows); the weight and bias gradients are column sums, computed by a second pass parallel over
// channel blocks that walks all rows in order, so the sums are race-free and bit-identical for any
// thread count. The normalised input is recomputed from (inp, mean, rstd) rather than stored.
#include "engine/cpu/layernorm.h"

#include <cmath>
#include <cstddef>

#include "engine/cpu/simd.h"

namespace flotilla::cpu {

FLOTILLA_SIMD_CLONES
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, long N, int C) {
#pragma omp parallel for schedule(static)
  for (long r = 0; r < N; ++r) {
    const float* x = inp + static_cast<size_t>(r) * C;
    float* o = out + static_cast<size_t>(r) * C;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int c = 0; c < C; ++c) sum += x[c];
    const float m = sum / static_cast<float>(C);
    float var = 0.0f;
#pragma omp simd reduction(+ : var)
    for (int c = 0; c < C; ++c) var += (x[c] - m) * (x[c] - m);
    const float s = 1.0f / std::sqrt(var / static_cast<float>(C) + kLayerNormEps);
    for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[r] = m;
    rstd[r] = s;
  }
}

FLOTILLA_SIMD_CLONES
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, long N, int C) {
  constexpr int kBlock = 32;
  const int blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (long r = 0; r < N; ++r) {
      const size_t off = static_cast<size_t>(r) * C;
      const float* x = inp + off;
      const float* d = dout + off;
      float* dx = dinp + off;
      const float m = mean[r], s = rstd[r];
      float dnorm_sum = 0.0f, dnorm_norm_sum = 0.0f;
#pragma omp simd reduction(+ : dnorm_sum, dnorm_norm_sum)
      for (int c = 0; c < C; ++c) {
        const float dn = d[c] * weight[c];
        dnorm_sum += dn;
        dnorm_norm_sum += dn * (x[c] - m) * s;
      }
      const float dnorm_mean = dnorm_sum / static_cast<float>(C);
      const float dnorm_norm_mean = dnorm_norm_sum / static_cast<float>(C);
      for (int c = 0; c < C; ++c) {
        const float norm = (x[c] - m) * s;
        dx[c] += (d[c] * weight[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
      }
    }
    // The second loop only reads what the first one reads, so no barrier is needed between them.
#pragma omp for schedule(static)
    for (int blk = 0; blk < blocks; ++blk) {
      const int c0 = blk * kBlock, c1 = c0 + kBlock < C ? c0 + kBlock : C;
      float dw[kBlock] = {}, db[kBlock] = {};
      for (long r = 0; r < N; ++r) {
        const size_t off = static_cast<size_t>(r) * C;
        const float m = mean[r], s = rstd[r];
        for (int c = c0; c < c1; ++c) {
          dw[c - c0] += dout[off + c] * (inp[off + c] - m) * s;
          db[c - c0] += dout[off + c];
        }
      }
      for (int c = c0; c < c1; ++c) {
        dweight[c] += dw[c - c0];
        dbias[c] += db[c - c0];
      }
    }
  }
}

}  // namespace flotilla::cpu
