// GELU with the tanh approximation (GPT-2's "gelu_new").
#pragma once

#include <cstddef>

namespace flotilla::cpu {

// out (n) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void gelu_forward(float* out, const float* inp, size_t n);

// dinp (n) = gelu'(inp) * dout; dinp may alias dout (the model does it in place).
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t n);

}  // namespace flotilla::cpu
