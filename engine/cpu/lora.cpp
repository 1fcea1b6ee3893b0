// LoRA's dropout on the CPU (see lora.h). Each row is independent, so the rows are split over the
// OpenMP threads and the result does not depend on the thread count.
#include "engine/cpu/lora.h"

#include "engine/core/lora_mask.h"

namespace flotilla::cpu {

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
