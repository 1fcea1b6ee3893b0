// RoPE kernels. Non-obvious decision: the angle is p * inv_freq[j] rounded to fp32 and its cos and
// sin are taken in fp32 per token, exactly the values HF's rotary embedding builds (an fp32
// position times an fp32 inverse frequency, then cos/sin), rather than a cached table built by a
// recurrence, whose error would grow with the position.
#include "engine/cpu/rope.h"
#include "engine/cpu/simd.h"

#include <cmath>
#include <cstddef>
#include <vector>

namespace flotilla::cpu {
namespace {

void rotate(float* qkv, const int32_t* pos, const float* inv_freq, int B, int T, int NH, int NKV, int HD,
            float sign) {
  const int half = HD / 2, heads = NH + NKV, ld = (NH + 2 * NKV) * HD;
  const long rows = static_cast<long>(B) * T;
#pragma omp parallel if (rows * ld >= kParallelMin)
  {
    std::vector<float> cs(static_cast<size_t>(HD));  // cos then sin of this token's angles
#pragma omp for schedule(static)
    for (long r = 0; r < rows; ++r) {
      const float p = static_cast<float>(pos != nullptr ? pos[r] : static_cast<int32_t>(r % T));
      for (int j = 0; j < half; ++j) {
        const float a = p * inv_freq[j];
        cs[static_cast<size_t>(j)] = std::cos(a);
        cs[static_cast<size_t>(half + j)] = sign * std::sin(a);
      }
      float* row = qkv + static_cast<size_t>(r) * ld;
      for (int h = 0; h < heads; ++h) {
        float* x = row + static_cast<size_t>(h) * HD;
        for (int j = 0; j < half; ++j) {
          const float c = cs[static_cast<size_t>(j)], s = cs[static_cast<size_t>(half + j)];
          const float x0 = x[j], x1 = x[j + half];
          x[j] = x0 * c - x1 * s;
          x[j + half] = x1 * c + x0 * s;
        }
      }
    }
  }
}

}  // namespace

void rope_forward(float* qkv, const int32_t* pos, const float* inv_freq, int B, int T, int NH, int NKV,
                  int HD) {
  rotate(qkv, pos, inv_freq, B, T, NH, NKV, HD, 1.0f);
}

void rope_backward(float* dqkv, const int32_t* pos, const float* inv_freq, int B, int T, int NH, int NKV,
                   int HD) {
  rotate(dqkv, pos, inv_freq, B, T, NH, NKV, HD, -1.0f);
}

}  // namespace flotilla::cpu
