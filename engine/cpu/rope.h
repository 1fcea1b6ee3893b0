// Rotary position embedding in Hugging Face's rotate-half convention (Llama, Qwen, Mistral).
#pragma once

#include <cstdint>

namespace flotilla::cpu {

// In place on the q and k heads of qkv (B, T, (NH + 2*NKV) * HD) ([q | k | v] per token): element
// j < HD/2 of a head pairs with j + HD/2, angle a = p * inv_freq[j] with p = pos[b, t] (or t when
// pos is null), x_j' = x_j cos a - x_{j+HD/2} sin a, x_{j+HD/2}' = x_{j+HD/2} cos a + x_j sin a
// (HF: q * cos + rotate_half(q) * sin). cos and sin are computed in fp32 from the fp32 angle.
void rope_forward(float* qkv, const int32_t* pos, const float* inv_freq, int B, int T, int NH, int NKV,
                  int HD);
// The transpose (rotation by -a), in place on d(q), d(k).
void rope_backward(float* dqkv, const int32_t* pos, const float* inv_freq, int B, int T, int NH, int NKV,
                   int HD);

}  // namespace flotilla::cpu
