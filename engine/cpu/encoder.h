// Token + position embedding (the "encoder" kernel family, as in llm.c).
#pragma once

#include <cstdint>

namespace flotilla::cpu {

// out (B, T, C) = wte[inp[b, t]] + wpe[t]; wte (Vp, C), wpe (maxT, C), inp (B, T).
void encoder_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B, int T, int C);

// dwte (Vp, C) += scatter of dout rows by token; dwpe (maxT, C) += sum over b of dout[b, t].
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B, int T, int C);

}  // namespace flotilla::cpu
