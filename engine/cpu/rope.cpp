// RoPE kernels. Non-obvious decision: the angle is p * inv_freq[j] rounded to fp32 and its cos and
// sin are taken in fp32 per position, exactly the values HF's rotary embedding builds (an fp32
// position times an fp32 inverse frequency, then cos/sin), rather than a cached table built by a
// recurrence, whose error would grow with the position.
// The cos and sin are computed once per position a call sees (a table of positions x HD floats),
// not once per row: a batch of B rows of T tokens repeats each position B times, and the libm calls
// were most of the kernel (smollm2-135m B 4 x T 256: 64 calls per row, 0.65 ms of each 0.8 ms call).
// The values are the same calls on the same arguments, so the bits are unchanged. A decode step (a
// few rows far into the sequence) keeps the per-row computation: a table up to its position would
// cost more than the rows.
#include "engine/cpu/rope.h"
#include "engine/cpu/simd.h"

#include <cmath>
#include <cstddef>
#include <vector>

namespace flotilla::cpu {
namespace {

// cos(a) then sign * sin(a) of a = p * inv_freq[j], j < HD / 2, into cs (HD floats).
void angles(float* cs, int32_t position, const float* inv_freq, int half, float sign) {
  const float p = static_cast<float>(position);
  for (int j = 0; j < half; ++j) {
    const float a = p * inv_freq[j];
    cs[j] = std::cos(a);
    cs[half + j] = sign * std::sin(a);
  }
}

void rotate(float* qkv, const int32_t* pos, const float* inv_freq, int B, int T, int NH, int NKV, int HD,
            float sign) {
  const int half = HD / 2, heads = NH + NKV, ld = (NH + 2 * NKV) * HD;
  const long rows = static_cast<long>(B) * T;
  // Positions 0 .. npos - 1 (without pos: r % T); a table when it has no more entries than rows.
  long npos = T;
  bool negative = false;
  if (pos != nullptr) {
    int32_t top = 0;
    for (long r = 0; r < rows; ++r) {
      top = pos[r] > top ? pos[r] : top;
      negative = negative || pos[r] < 0;
    }
    npos = static_cast<long>(top) + 1;
  }
  const bool table = !negative && npos <= rows;
  std::vector<float> cs_table(table ? static_cast<size_t>(npos) * static_cast<size_t>(HD) : 0);
  if (table) {
#pragma omp parallel for schedule(static) if (npos * HD >= kParallelMin)
    for (long p = 0; p < npos; ++p)
      angles(cs_table.data() + static_cast<size_t>(p) * static_cast<size_t>(HD), static_cast<int32_t>(p),
             inv_freq, half, sign);
  }
#pragma omp parallel if (rows * ld >= kParallelMin)
  {
    std::vector<float> own(table ? 0 : static_cast<size_t>(HD));  // this row's cos and sin (no table)
#pragma omp for schedule(static)
    for (long r = 0; r < rows; ++r) {
      const int32_t p = pos != nullptr ? pos[r] : static_cast<int32_t>(r % T);
      const float* cs;
      if (table) {
        cs = cs_table.data() + static_cast<size_t>(p) * static_cast<size_t>(HD);
      } else {
        angles(own.data(), p, inv_freq, half, sign);
        cs = own.data();
      }
      float* row = qkv + static_cast<size_t>(r) * ld;
      for (int h = 0; h < heads; ++h) {
        float* x = row + static_cast<size_t>(h) * HD;
        for (int j = 0; j < half; ++j) {
          const float c = cs[j], s = cs[half + j];
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
