// GELU kernels. Non-obvious decision: tanh comes from our vectorisable exp (simd.h), so a whole
// (B, T, 4C) activation is one SIMD loop per thread instead of a libm call per element.
#include "engine/cpu/gelu.h"

#include "engine/cpu/simd.h"

namespace flotilla::cpu {
namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
}  // namespace

FLOTILLA_SIMD_CLONES
void gelu_forward(float* out, const float* inp, size_t n) {
  const long count = static_cast<long>(n);
#pragma omp parallel for simd schedule(static)
  for (long i = 0; i < count; ++i) {
    const float x = inp[i];
    const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
    out[i] = 0.5f * x * (1.0f + tanh_approx(u));
  }
}

FLOTILLA_SIMD_CLONES
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n) {
  const long count = static_cast<long>(n);
#pragma omp parallel for simd schedule(static)
  for (long i = 0; i < count; ++i) {
    const float x = inp[i];
    const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
    const float th = tanh_approx(u);
    const float sech2 = 1.0f - th * th;
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
    dinp[i] = grad * dout[i];
  }
}

}  // namespace flotilla::cpu
