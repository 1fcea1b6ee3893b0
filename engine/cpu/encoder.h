// Token + position embedding (the "encoder" kernel family, as in llm.c).
#pragma once

#include <cstdint>

namespace flotilla::cpu {

// out (B, T, C) = wte[inp[b, t]] + wpe[pos[b, t]]; wte (Vp, C), wpe (maxT, C), inp (B, T).
// pos == nullptr: position t; wpe == nullptr: no position term (llama); inp < 0: the wte term is 0
// (under tensor parallelism another rank holds that row).
void encoder_forward(float* out, const int32_t* inp, const float* wte, const float* wpe, const int32_t* pos,
                     int B, int T, int C);
// dwte (Vp, C) += scatter of dout rows by token (ids < 0 skipped); dwpe (maxT, C) += sum of the
// rows at each position (skipped when null).
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, const int32_t* pos,
                      int B, int T, int C);

}  // namespace flotilla::cpu
