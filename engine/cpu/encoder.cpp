// Embedding lookup and its scatter-add backward.
//
// Non-obvious decision: the backward scatter (many rows may hit the same token) is parallelised
// over channel blocks, not over rows: each thread owns a slice of channels and walks all B*T rows
// in order, so there are no races and the float sums happen in the same order for any thread count.
#include "engine/cpu/encoder.h"

#include <cstddef>

#include "engine/cpu/simd.h"

namespace flotilla::cpu {

FLOTILLA_SIMD_CLONES
void encoder_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, const int32_t* pos,
                     int B, int T, int C) {
  const long rows = static_cast<long>(B) * T;
#pragma omp parallel for schedule(static) if (rows * C >= kParallelMin)
  for (long r = 0; r < rows; ++r) {
    float* o = out + static_cast<size_t>(r) * C;
    const int t = pos != nullptr ? pos[r] : static_cast<int>(r % T);
    const float* pe = wpe != nullptr ? wpe + static_cast<size_t>(t) * C : nullptr;
    if (inp[r] < 0) {
      for (int c = 0; c < C; ++c) o[c] = pe != nullptr ? pe[c] : 0.0f;
      continue;
    }
    const float* we = wte + static_cast<size_t>(inp[r]) * C;
    if (pe != nullptr)
      for (int c = 0; c < C; ++c) o[c] = we[c] + pe[c];
    else
      for (int c = 0; c < C; ++c) o[c] = we[c];
  }
}

FLOTILLA_SIMD_CLONES
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, const int32_t* pos,
                      int B, int T, int C) {
  constexpr int kBlock = 32;  // channels per task
  const int blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < blocks; ++blk) {
    const int c0 = blk * kBlock, c1 = c0 + kBlock < C ? c0 + kBlock : C;
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        const size_t r = static_cast<size_t>(b) * T + t;
        const float* d = dout + r * C;
        if (dwpe != nullptr) {
          float* pe = dwpe + static_cast<size_t>(pos != nullptr ? pos[r] : t) * C;
          for (int c = c0; c < c1; ++c) pe[c] += d[c];
        }
        if (inp[r] < 0) continue;
        float* we = dwte + static_cast<size_t>(inp[r]) * C;
        for (int c = c0; c < c1; ++c) we[c] += d[c];
      }
    }
  }
}

}  // namespace flotilla::cpu
