// RoPE on the CPU against the per-row formula it replaced (cos and sin of the fp32 angle p *
// inv_freq[j] taken for every row), bit for bit: positions r % T, packed documents, a decode step
// far into the sequence (few rows, large positions: the per-row path), forward and backward, one and
// two threads. The kernel now takes the cos and sin once per position (rope.cpp); the same libm
// calls on the same arguments must give the same bits.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "check.h"
#include "engine/cpu/rope.h"

using namespace flotilla;

namespace {

void reference(float* qkv, const int32_t* pos, const float* inv_freq, int B, int T, int NH, int NKV, int HD,
               float sign) {
  const int half = HD / 2, ld = (NH + 2 * NKV) * HD;
  std::vector<float> cs(static_cast<size_t>(HD));
  for (long r = 0; r < static_cast<long>(B) * T; ++r) {
    const float p = static_cast<float>(pos != nullptr ? pos[r] : static_cast<int32_t>(r % T));
    for (int j = 0; j < half; ++j) {
      const float a = p * inv_freq[j];
      cs[static_cast<size_t>(j)] = std::cos(a);
      cs[static_cast<size_t>(half + j)] = sign * std::sin(a);
    }
    for (int h = 0; h < NH + NKV; ++h) {
      float* x = qkv + static_cast<size_t>(r) * ld + static_cast<size_t>(h) * HD;
      for (int j = 0; j < half; ++j) {
        const float c = cs[static_cast<size_t>(j)], s = cs[static_cast<size_t>(half + j)];
        const float x0 = x[j], x1 = x[j + half];
        x[j] = x0 * c - x1 * s;
        x[j + half] = x1 * c + x0 * s;
      }
    }
  }
}

void check_case(const char* what, int B, int T, const std::vector<int32_t>& positions) {
  const int NH = 9, NKV = 3, HD = 64;
  const int32_t* pos = positions.empty() ? nullptr : positions.data();
  std::vector<float> inv_freq(HD / 2);
  for (int j = 0; j < HD / 2; ++j) inv_freq[static_cast<size_t>(j)] = std::pow(10000.0f, -2.0f * j / HD);
  const size_t n = static_cast<size_t>(B) * T * (NH + 2 * NKV) * HD;
  std::vector<float> x(n);
  uint32_t s = 7u;
  for (float& v : x) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<float>(s >> 8) / 16777216.0f - 0.5f;
  }
  for (int backward = 0; backward < 2; ++backward)
    for (int threads : {1, 2}) {
      std::vector<float> want = x, got = x;
      reference(want.data(), pos, inv_freq.data(), B, T, NH, NKV, HD, backward ? -1.0f : 1.0f);
      omp_set_num_threads(threads);
      if (backward)
        cpu::rope_backward(got.data(), pos, inv_freq.data(), B, T, NH, NKV, HD);
      else
        cpu::rope_forward(got.data(), pos, inv_freq.data(), B, T, NH, NKV, HD);
      CHECK_MSG(std::memcmp(want.data(), got.data(), n * sizeof(float)) == 0,
                "%s, %s, %d threads: bits differ", what, backward ? "backward" : "forward", threads);
    }
}

}  // namespace

int main() {
  check_case("positions r % T", 4, 256, {});
  std::vector<int32_t> packed(2 * 100);
  for (int r = 0; r < 200; ++r) packed[static_cast<size_t>(r)] = r % 100 < 37 ? r % 100 : r % 100 - 37;
  check_case("packed documents", 2, 100, packed);
  check_case("decode step at positions 4000 and 17", 2, 1, {4000, 17});
  return flotilla_test::summary("cpu_rope");
}
