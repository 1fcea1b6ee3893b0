// AdamW update kernel (PyTorch semantics) on one contiguous range of parameters.
#pragma once

#include <cstddef>
#include <cstdint>

namespace flotilla::cpu {

// For i < n, with step t >= 1 (bias corrections 1 - beta^t) and g = grads[i] * grad_scale:
//   p *= 1 - lr * weight_decay                      (decoupled decay; pass 0 for no decay)
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
void adamw_update(float* params, const float* grads, float* m, float* v, size_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, int64_t t, float grad_scale = 1.0f);

}  // namespace flotilla::cpu
