// Residual add. Trivial, but a kernel family of its own so the CUDA backend has a named twin.
#include "engine/cpu/residual.h"

#include "engine/cpu/simd.h"

namespace flotilla::cpu {

FLOTILLA_SIMD_CLONES
void residual_forward(float* out, const float* a, const float* b, size_t n) {
  const long count = static_cast<long>(n);
#pragma omp parallel for simd schedule(static) if (count >= kParallelMin)
  for (long i = 0; i < count; ++i) out[i] = a[i] + b[i];
}

}  // namespace flotilla::cpu
