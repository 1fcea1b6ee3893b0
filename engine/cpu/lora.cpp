// LoRA's adapter-path kernels on the CPU (see lora.h). Each row is independent, so the rows are
// split over the OpenMP threads and the results do not depend on the thread count.
#include "engine/cpu/lora.h"

#include "engine/core/lora_mask.h"
#include "engine/cpu/simd.h"

namespace flotilla::cpu {

FLOTILLA_SIMD_CLONES
void add_scaled_cols(float* y, int ldy, int col0, const float* x, long N, int n, float scale) {
#pragma omp parallel for schedule(static)
  for (long r = 0; r < N; ++r) {
    float* dst = y + static_cast<size_t>(r) * static_cast<size_t>(ldy) + col0;
    const float* src = x + static_cast<size_t>(r) * static_cast<size_t>(n);
    for (int j = 0; j < n; ++j) dst[j] += scale * src[j];
  }
}

FLOTILLA_SIMD_CLONES
void scaled_cols(float* out, const float* y, int ldy, int col0, long N, int n, float scale) {
#pragma omp parallel for schedule(static)
  for (long r = 0; r < N; ++r) {
    const float* src = y + static_cast<size_t>(r) * static_cast<size_t>(ldy) + col0;
    float* dst = out + static_cast<size_t>(r) * static_cast<size_t>(n);
    for (int j = 0; j < n; ++j) dst[j] = scale * src[j];
  }
}

void dropout(float* out, const float* in, long N, int n, float p, uint64_t key, int ld, int col0) {
  const uint32_t threshold = lora_dropout_threshold(p);
  const float keep_scale = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static)
  for (long r = 0; r < N; ++r) {
    const size_t row = static_cast<size_t>(r) * static_cast<size_t>(n);
    const uint64_t base = static_cast<uint64_t>(r) * static_cast<uint64_t>(ld) + static_cast<uint64_t>(col0);
    for (int j = 0; j < n; ++j)
      out[row + j] =
          lora_mask_bits(key, base + static_cast<uint64_t>(j)) >= threshold ? in[row + j] * keep_scale : 0.0f;
  }
}

}  // namespace flotilla::cpu
