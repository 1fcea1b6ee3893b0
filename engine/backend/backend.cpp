// Backend's defaults: the compositions every backend may inherit (a fused family written as its
// two parts) and the "this backend has no such kernel" error for the rest.
#include "engine/backend/backend.h"

#include "engine/core/error.h"

namespace flotilla {

void Backend::unsupported(const char* family, const char* type) const {
  throw_config(std::string("the ") + name() + " backend has no " + type + " " + family +
               " kernel; use train.dtype = \"fp32\" or another run.device");
}

void Backend::set_matmul_dtype(DType t) {
  if (t != DType::kF32)
    throw_config(std::string("train.dtype = \"") + dtype_name(t) + "\": the " + name() +
                 " backend has no bf16 matmuls on fp32 storage; use train.dtype = \"fp32\"");
}

void Backend::residual_layernorm_forward(float* residual, float* out, float* mean, float* rstd,
                                         const float* a, const float* b, const float* weight,
                                         const float* bias, long N, int C) {
  residual_forward(residual, a, b, static_cast<size_t>(N) * static_cast<size_t>(C));
  layernorm_forward(out, mean, rstd, residual, weight, bias, N, C);
}

void Backend::residual_rmsnorm_forward(float* residual, float* out, float* rstd, const float* a,
                                       const float* b, const float* weight, long N, int C, float eps) {
  residual_forward(residual, a, b, static_cast<size_t>(N) * static_cast<size_t>(C));
  rmsnorm_forward(out, rstd, residual, weight, N, C, eps);
}

// Families without a default: each backend that has them overrides.
#define FLOTILLA_UNSUPPORTED(ret, family, type, ...) \
  ret Backend::family(__VA_ARGS__) { unsupported(#family, type); }

FLOTILLA_UNSUPPORTED(void, encoder_forward, "bf16", bf16_t*, const int32_t*, const bf16_t*, const bf16_t*,
                     const int32_t*, int, int, int)
FLOTILLA_UNSUPPORTED(void, encoder_backward, "bf16", bf16_t*, bf16_t*, const bf16_t*, const int32_t*,
                     const int32_t*, int, int, int)
FLOTILLA_UNSUPPORTED(void, layernorm_forward, "bf16", bf16_t*, float*, float*, const bf16_t*, const bf16_t*,
                     const bf16_t*, long, int)
FLOTILLA_UNSUPPORTED(void, residual_layernorm_forward, "bf16", bf16_t*, bf16_t*, float*, float*,
                     const bf16_t*, const bf16_t*, const bf16_t*, const bf16_t*, long, int)
FLOTILLA_UNSUPPORTED(void, layernorm_backward, "bf16", bf16_t*, bf16_t*, bf16_t*, const bf16_t*,
                     const bf16_t*, const bf16_t*, const float*, const float*, long, int)
FLOTILLA_UNSUPPORTED(void, rmsnorm_forward, "fp32", float*, float*, const float*, const float*, long, int,
                     float)
FLOTILLA_UNSUPPORTED(void, rmsnorm_forward, "bf16", bf16_t*, float*, const bf16_t*, const bf16_t*, long, int,
                     float)
FLOTILLA_UNSUPPORTED(void, residual_rmsnorm_forward, "bf16", bf16_t*, bf16_t*, float*, const bf16_t*,
                     const bf16_t*, const bf16_t*, long, int, float)
FLOTILLA_UNSUPPORTED(void, rmsnorm_backward, "fp32", float*, float*, const float*, const float*, const float*,
                     const float*, long, int)
FLOTILLA_UNSUPPORTED(void, rmsnorm_backward, "bf16", bf16_t*, bf16_t*, const bf16_t*, const bf16_t*,
                     const bf16_t*, const float*, long, int)
FLOTILLA_UNSUPPORTED(void, matmul_forward, "bf16", bf16_t*, const bf16_t*, const bf16_t*, const bf16_t*, int,
                     int, int, bf16_t*)
FLOTILLA_UNSUPPORTED(void, matmul_backward, "bf16", bf16_t*, bf16_t*, bf16_t*, const bf16_t*, const bf16_t*,
                     const bf16_t*, int, int, int)
FLOTILLA_UNSUPPORTED(void, attention_forward, "bf16", bf16_t*, float*, const bf16_t*, const int32_t*, int,
                     int, int, int, int)
FLOTILLA_UNSUPPORTED(void, attention_backward, "bf16", bf16_t*, const bf16_t*, const bf16_t*, const bf16_t*,
                     const float*, const int32_t*, int, int, int, int, int)
FLOTILLA_UNSUPPORTED(void, attention_cached_forward, "fp32", float*, const float*, float*, float*,
                     const int32_t*, int, int, int, int, int, int, int)
FLOTILLA_UNSUPPORTED(void, attention_cached_forward, "bf16", bf16_t*, const bf16_t*, bf16_t*, bf16_t*,
                     const int32_t*, int, int, int, int, int, int, int)
FLOTILLA_UNSUPPORTED(void, rope_forward, "fp32", float*, const int32_t*, const float*, int, int, int, int,
                     int)
FLOTILLA_UNSUPPORTED(void, rope_forward, "bf16", bf16_t*, const int32_t*, const float*, int, int, int, int,
                     int)
FLOTILLA_UNSUPPORTED(void, rope_backward, "fp32", float*, const int32_t*, const float*, int, int, int, int,
                     int)
FLOTILLA_UNSUPPORTED(void, rope_backward, "bf16", bf16_t*, const int32_t*, const float*, int, int, int, int,
                     int)
FLOTILLA_UNSUPPORTED(void, qk_norm_forward, "fp32", float*, float*, const float*, const float*, const float*,
                     long, int, int, int, float)
FLOTILLA_UNSUPPORTED(void, qk_norm_forward, "bf16", bf16_t*, float*, const bf16_t*, const bf16_t*,
                     const bf16_t*, long, int, int, int, float)
FLOTILLA_UNSUPPORTED(void, qk_norm_backward, "fp32", float*, float*, float*, const float*, const float*,
                     const float*, const float*, const float*, long, int, int, int)
FLOTILLA_UNSUPPORTED(void, qk_norm_backward, "bf16", bf16_t*, bf16_t*, bf16_t*, const bf16_t*, const bf16_t*,
                     const bf16_t*, const bf16_t*, const float*, long, int, int, int)
FLOTILLA_UNSUPPORTED(void, gelu_forward, "bf16", bf16_t*, const bf16_t*, size_t)
FLOTILLA_UNSUPPORTED(void, gelu_backward, "bf16", bf16_t*, const bf16_t*, const bf16_t*, size_t)
FLOTILLA_UNSUPPORTED(void, swiglu_forward, "fp32", float*, const float*, long, int)
FLOTILLA_UNSUPPORTED(void, swiglu_forward, "bf16", bf16_t*, const bf16_t*, long, int)
FLOTILLA_UNSUPPORTED(void, swiglu_backward, "fp32", float*, const float*, const float*, long, int)
FLOTILLA_UNSUPPORTED(void, swiglu_backward, "bf16", bf16_t*, const bf16_t*, const bf16_t*, long, int)
FLOTILLA_UNSUPPORTED(void, residual_forward, "bf16", bf16_t*, const bf16_t*, const bf16_t*, size_t)
FLOTILLA_UNSUPPORTED(void, softmax_crossentropy_forward, "bf16", float*, float*, const bf16_t*,
                     const int32_t*, long, int, int)
FLOTILLA_UNSUPPORTED(void, softmax_crossentropy_backward, "bf16", bf16_t*, const bf16_t*, const float*,
                     const int32_t*, float, long, int, int)
FLOTILLA_UNSUPPORTED(void, gather_target_logits, "fp32", float*, const float*, const int32_t*, long, int)
FLOTILLA_UNSUPPORTED(void, gather_target_logits, "bf16", float*, const bf16_t*, const int32_t*, long, int)
FLOTILLA_UNSUPPORTED(void, convert, "bf16", bf16_t*, const float*, size_t)
FLOTILLA_UNSUPPORTED(void, convert, "bf16", float*, const bf16_t*, size_t)
FLOTILLA_UNSUPPORTED(double, sum_values, "fp32", const float*, size_t)
FLOTILLA_UNSUPPORTED(void, lora_gemm, "fp32", bool, bool, int, int, int, float, const float*, int, const float*,
                     int, float, float*, int)
FLOTILLA_UNSUPPORTED(void, lora_gemm, "bf16", bool, bool, int, int, int, float, const bf16_t*, int,
                     const bf16_t*, int, float, bf16_t*, int)
FLOTILLA_UNSUPPORTED(void, dropout, "fp32", float*, const float*, long, int, float, uint64_t, int, int)
FLOTILLA_UNSUPPORTED(void, dropout, "bf16", bf16_t*, const bf16_t*, long, int, float, uint64_t, int, int)
FLOTILLA_UNSUPPORTED(void, nf4_matmul_forward, "fp32", float*, int, const float*, const nf4::View&, const float*,
                     int)
FLOTILLA_UNSUPPORTED(void, nf4_matmul_forward, "bf16", bf16_t*, int, const bf16_t*, const nf4::View&,
                     const bf16_t*, int)
FLOTILLA_UNSUPPORTED(void, nf4_matmul_backward, "fp32", float*, const float*, int, const nf4::View&, int, bool)
FLOTILLA_UNSUPPORTED(void, nf4_matmul_backward, "bf16", bf16_t*, const bf16_t*, int, const nf4::View&, int,
                     bool)
FLOTILLA_UNSUPPORTED(void, nf4_dequantize, "fp32", float*, const nf4::View&)
FLOTILLA_UNSUPPORTED(void, nf4_dequantize, "bf16", bf16_t*, const nf4::View&)
FLOTILLA_UNSUPPORTED(void, adamw_update, "bf16", bf16_t*, float*, const float*, float*, float*, size_t,
                     const AdamWArgs&)
FLOTILLA_UNSUPPORTED(void, adamw_update, "bf16", bf16_t*, float*, const bf16_t*, float*, float*, size_t,
                     const AdamWArgs&)

#undef FLOTILLA_UNSUPPORTED

}  // namespace flotilla
