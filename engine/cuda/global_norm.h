// Deterministic global reductions on the GPU; CPU twin: engine/cpu/global_norm.h.
#pragma once

#include <cstddef>

#include "engine/cuda/context.h"

namespace flotilla::cuda {

// sum of g[i]^2 in double, bit-identical run to run and on any GPU (two passes, no atomics);
// synchronises the stream to return the value.
template <typename T>
double sum_squares(Context& ctx, const T* g, size_t n);

// sum of x[i] in double, same scheme.
double sum_values(Context& ctx, const float* x, size_t n);

}  // namespace flotilla::cuda
