// LoRA's seeded dropout (engine/model/lora.h; its products run on the threaded sgemm, matmul.h gemm).
#pragma once

#include <cstddef>
#include <cstdint>

namespace flotilla::cpu {

// out[r, j] = in[r, j] * keep / (1 - p) for (N, n) tensors, keep drawn for mask index r * ld + col0 + j
// (engine/core/lora_mask.h; out may alias in).
void dropout(float* out, const float* in, long N, int n, float p, uint64_t key, int ld, int col0);

}  // namespace flotilla::cpu
