// AdamW kernels. Non-obvious decision: the bias corrections are computed once in double on the
// host, exactly as the CPU kernel does, so the fp32 GPU step differs from the CPU one only by
// sqrt/division rounding; the mixed-precision kernel writes the bf16 working copy in the same
// pass (one read of the master weights), optionally with stochastic rounding.
#include <cmath>

#include "engine/cuda/adamw.h"
#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_check.h"

namespace flotilla::cuda {
namespace {

struct Coeffs {
  float beta1, beta2, one_minus_b1, one_minus_b2, eps, step_size, inv_sqrt_bc2, decay;
};

Coeffs coeffs(float lr, float beta1, float beta2, float eps, float weight_decay, int64_t t) {
  const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(t));
  const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(t));
  Coeffs c;
  c.beta1 = beta1;
  c.beta2 = beta2;
  c.one_minus_b1 = 1.0f - beta1;
  c.one_minus_b2 = 1.0f - beta2;
  c.eps = eps;
  c.step_size = static_cast<float>(lr / bc1);
  c.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2));
  c.decay = 1.0f - lr * weight_decay;
  return c;
}

__device__ __forceinline__ float adamw_one(float p, float g, float* m, float* v, const Coeffs& c) {
  const float mi = c.beta1 * *m + c.one_minus_b1 * g;
  const float vi = c.beta2 * *v + c.one_minus_b2 * g * g;
  *m = mi;
  *v = vi;
  const float denom = sqrtf(vi) * c.inv_sqrt_bc2 + c.eps;
  return p * c.decay - c.step_size * mi / denom;
}

__global__ void adamw_kernel(float* params, const float* grads, float* m, float* v, size_t n, float grad_scale,
                             Coeffs c) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += stride)
    params[i] = adamw_one(params[i], grads[i] * grad_scale, m + i, v + i, c);
}

__device__ __forceinline__ uint32_t hash3(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t h = a * 0x9E3779B1u ^ (b + 0x7F4A7C15u) * 0x85EBCA6Bu ^ c * 0xC2B2AE35u;
  h ^= h >> 16;
  h *= 0x7FEB352Du;
  h ^= h >> 15;
  h *= 0x846CA68Bu;
  h ^= h >> 16;
  return h;
}

// Round x to bf16 stochastically: add 16 random low bits, then truncate.
__device__ __forceinline__ bf16 round_stochastic(float x, uint32_t bits) {
  if (!isfinite(x)) return __float2bfloat16_rn(x);
  const uint32_t u = __float_as_uint(x) + (bits & 0xFFFFu);
  return __ushort_as_bfloat16(static_cast<unsigned short>((u & 0xFFFF0000u) >> 16));
}

template <typename G>
__global__ void adamw_mixed_kernel(bf16* params, float* master, const G* grads, float* m, float* v, size_t n,
                                   float grad_scale, Coeffs c, uint32_t seed, uint32_t step) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    const float p = adamw_one(master[i], to_f(grads[i]) * grad_scale, m + i, v + i, c);
    master[i] = p;
    params[i] = seed == 0 ? __float2bfloat16_rn(p) : round_stochastic(p, hash3(seed, step, static_cast<uint32_t>(i)));
  }
}

}  // namespace

void adamw_update(Context& ctx, float* params, const float* grads, float* m, float* v, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int64_t t, float grad_scale) {
  if (n == 0) return;
  adamw_kernel<<<grid_for(n, 256), 256, 0, ctx.stream()>>>(params, grads, m, v, n, grad_scale,
                                                            coeffs(lr, beta1, beta2, eps, weight_decay, t));
  check_launch("adamw_update");
}

template <typename G>
void adamw_update_mixed(Context& ctx, bf16* params, float* master, const G* grads, float* m, float* v, size_t n,
                        float grad_scale, float lr, float beta1, float beta2, float eps, float weight_decay,
                        int64_t t, uint32_t seed) {
  if (n == 0) return;
  adamw_mixed_kernel<G><<<grid_for(n, 256), 256, 0, ctx.stream()>>>(
      params, master, grads, m, v, n, grad_scale, coeffs(lr, beta1, beta2, eps, weight_decay, t), seed,
      static_cast<uint32_t>(t));
  check_launch("adamw_update_mixed");
}

template void adamw_update_mixed<float>(Context&, bf16*, float*, const float*, float*, float*, size_t, float, float,
                                        float, float, float, float, int64_t, uint32_t);
template void adamw_update_mixed<bf16>(Context&, bf16*, float*, const bf16*, float*, float*, size_t, float, float,
                                       float, float, float, float, int64_t, uint32_t);

}  // namespace flotilla::cuda
