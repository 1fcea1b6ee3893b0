// SwiGLU, the Llama family's MLP activation: silu(gate) * up.
#pragma once

namespace flotilla::cpu {

// out (N, F) = silu(g) * u, where inp (N, 2F) holds [g | u] per row (the fused gate/up
// projection's output) and silu(g) = g / (1 + exp(-g)).
void swiglu_forward(float* out, const float* inp, long N, int F);
// dinp (N, 2F) = [d(g) | d(u)] for dout (N, F): d(u) = dout * silu(g),
// d(g) = dout * u * sigmoid(g) * (1 + g * (1 - sigmoid(g))).
void swiglu_backward(float* dinp, const float* dout, const float* inp, long N, int F);

}  // namespace flotilla::cpu
