// Global gradient norm (for clipping) and gradient scaling.
#pragma once

#include <cstddef>

namespace flotilla::cpu {

// sum of g[i]^2 in double, bit-identical for any thread count.
double sum_squares(const float* g, size_t n);

// g[i] *= s.
void scale_values(float* g, size_t n, float s);

}  // namespace flotilla::cpu
