// Sum of squares for the global gradient norm.
//
// Non-obvious decision: the reduction is split into fixed blocks of 16384 elements (not one chunk
// per thread); each block is summed in double and the block sums are added in index order. The
// result therefore does not depend on the thread count, which keeps clipping (and so the whole
// run) reproducible when a run resumes with a different number of threads.
#include "engine/cpu/global_norm.h"

#include <vector>

#include "engine/cpu/simd.h"

namespace flotilla::cpu {
namespace {
constexpr size_t kBlock = 16384;
}

FLOTILLA_SIMD_CLONES
double sum_squares(const float* g, size_t n) {
  const long blocks = static_cast<long>((n + kBlock - 1) / kBlock);
  std::vector<double> partial(static_cast<size_t>(blocks));
#pragma omp parallel for schedule(static)
  for (long b = 0; b < blocks; ++b) {
    const size_t i0 = static_cast<size_t>(b) * kBlock;
    const size_t i1 = i0 + kBlock < n ? i0 + kBlock : n;
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (size_t i = i0; i < i1; ++i) s += static_cast<double>(g[i]) * g[i];
    partial[static_cast<size_t>(b)] = s;
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

FLOTILLA_SIMD_CLONES
void scale_values(float* g, size_t n, float s) {
  const long count = static_cast<long>(n);
#pragma omp parallel for simd schedule(static)
  for (long i = 0; i < count; ++i) g[i] *= s;
}

}  // namespace flotilla::cpu
