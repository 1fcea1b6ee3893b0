// LoRA's dropout on the GPU; CPU twin: engine/cpu/lora.h (the same masks bit for bit:
// engine/core/lora_mask.h). Its products run on cuBLASLt (matmul.h gemm_row_major).
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/cuda/context.h"

namespace flotilla::cuda {

// out[r, j] = in[r, j] * keep / (1 - p), mask index r * ld + col0 + j (out may alias in).
template <typename T>
void dropout(Context& ctx, T* out, const T* in, long N, int n, float p, uint64_t key, int ld, int col0);

}  // namespace flotilla::cuda
