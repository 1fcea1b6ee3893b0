// LoRA's adapter-path kernels (engine/model/lora.h): a scaled add into a column slice of a fused
// projection's output, the scaled copy of such a slice of its gradient, and the seeded dropout.
#pragma once

#include <cstddef>
#include <cstdint>

namespace flotilla::cpu {

// y[r, col0 + j] += scale * x[r, j] for r < N, j < n (rows of y are ldy floats apart, of x n).
void add_scaled_cols(float* y, int ldy, int col0, const float* x, long N, int n, float scale);
// out[r, j] = scale * y[r, col0 + j].
void scaled_cols(float* out, const float* y, int ldy, int col0, long N, int n, float scale);
// out[r, j] = in[r, j] * keep / (1 - p) for (N, n) tensors, keep drawn for mask index r * ld + col0 + j
// (engine/core/lora_mask.h; out may alias in).
void dropout(float* out, const float* in, long N, int n, float p, uint64_t key, int ld, int col0);

}  // namespace flotilla::cpu
