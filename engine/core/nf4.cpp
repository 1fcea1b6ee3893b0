// NF4 quantisation bit for bit as bitsandbytes 0.50.2 does it on the CPU (engine/core/nf4.h).
//
// What bitsandbytes runs, found by reading its Python sources and disassembling libbitsandbytes_cpu
// (tests/reference/make_qlora_goldens.py checks every rule below against it, docs/qlora.md):
//  - 4-bit codes: PyTorch ops (backends/default quantize_4bit). A block of 64 is scaled by
//    x * (1 / absmax) (a rounded reciprocal, then a rounded product), the short last block by
//    x / absmax (one rounded division), clamped to [-1, 1]; the code is the number of midpoints
//    (kCode[j] + kCode[j+1]) / 2 strictly below the scaled value (torch.bucketize), so a value
//    exactly on a midpoint takes the lower code. An odd element count is padded with 0.0 (code 7).
//    A full block of zeros keeps absmax 0; the short last block's absmax is clamped to 1e-38.
//  - offset: absmax.mean(), which PyTorch's CPU kernel computes as a cascade sum in 8 float lanes
//    (see torch_mean below; 8 lanes measured on AVX-512, AVX2 and the default build alike), then
//    divides by the count.
//  - 8-bit statistics: the compiled quantize_cpu. absmax2 = max(0, max |v|) over 256 values; the
//    code comes from a 65536-entry table: t = clamp(v * (1 / absmax2), -1, 1), index =
//    trunc(fma((t + 1) * 0.5, 65535, 0.5)) (a fused multiply-add in the binary), and table[i] is
//    the number of midpoints (code[j] + code[j+1]) * 0.5 strictly below (2i) / 65535 - 1. So it is
//    not always the nearest code: a value is first rounded to a 2^-15 grid.
//  - dynamic map: create_dynamic_map(signed=True) uses torch.linspace, whose CPU kernel computes
//    start + step * i with a fused multiply-add on every x86 build with AVX2 or AVX-512.
//
// This file is compiled with -ffp-contract=off (engine/CMakeLists.txt): every multiply and add
// below rounds on its own unless it says std::fma.
#include "engine/core/nf4.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "engine/core/error.h"

namespace flotilla::nf4 {

// bitsandbytes' NF4 table (functional.get_4bit_type("nf4")): these decimal strings are the shortest
// forms of its fp32 values, so they parse to the same bits.
const float kCode[16] = {-1.0f,
                         -0.6961928009986877f,
                         -0.5250730514526367f,
                         -0.39491748809814453f,
                         -0.28444138169288635f,
                         -0.18477343022823334f,
                         -0.09105003625154495f,
                         0.0f,
                         0.07958029955625534f,
                         0.16093020141124725f,
                         0.24611230194568634f,
                         0.33791524171829224f,
                         0.44070982933044434f,
                         0.5626170039176941f,
                         0.7229568362236023f,
                         1.0f};

namespace {

// torch.linspace(0.1, 1, n, dtype=float32) on an x86 CPU with AVX2/AVX-512: the first half counts up
// from the start, the second half down from the end, each a fused multiply-add.
std::vector<float> torch_linspace(float start, float end, int n) {
  const float step = (end - start) / static_cast<float>(n - 1);
  const int half = n / 2;
  std::vector<float> out(n);
  for (int i = 0; i < n; ++i)
    out[i] = i < half ? std::fma(step, static_cast<float>(i), start)
                      : std::fma(-step, static_cast<float>(n - i - 1), end);
  return out;
}

std::array<float, 256> make_dynamic_map() {
  // signed, 7 exponent bits, 8 bits: exponent e = 0..6 scales 2^e fraction values by 10^(e-6); the
  // additional-items branch of the definition is empty for these arguments.
  static const double kScale[7] = {1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0};
  std::vector<float> data;
  for (int e = 0; e < 7; ++e) {
    const std::vector<float> b = torch_linspace(0.1f, 1.0f, (1 << e) + 1);
    const float s = static_cast<float>(kScale[e]);  // PyTorch casts the Python scalar to the tensor's fp32
    for (size_t j = 0; j + 1 < b.size(); ++j) {
      const float mean = (b[j] + b[j + 1]) / 2.0f;
      data.push_back(s * mean);
      data.push_back(-s * mean);
    }
  }
  data.push_back(0.0f);
  data.push_back(1.0f);
  std::sort(data.begin(), data.end());
  std::array<float, 256> out{};
  std::copy(data.begin(), data.end(), out.begin());  // exactly 256 values, no padding needed
  return out;
}

// quantize_cpu's 65536-entry table for the dynamic map (see the top).
std::vector<uint8_t> make_dynamic_lut() {
  const float* code = dynamic_map();
  float mid[255];
  for (int j = 0; j < 255; ++j) mid[j] = 0.5f * (code[j] + code[j + 1]);
  std::vector<uint8_t> lut(65536);
  int j = 0;
  for (int i = 0; i < 65536; ++i) {
    const float val = (static_cast<float>(i) + static_cast<float>(i)) / 65535.0f - 1.0f;
    while (j < 255 && mid[j] < val) ++j;
    lut[i] = static_cast<uint8_t>(j);
  }
  return lut;
}

// PyTorch's CPU sum of n contiguous floats (aten/src/ATen/native/cpu/SumKernel.cpp, single thread),
// with L-float vector lanes: the order of additions decides the last bits of the offset.
template <int L>
struct Lanes {
  float v[L];
  void add(const Lanes& o) {
    for (int l = 0; l < L; ++l) v[l] += o.v[l];
  }
};

int64_t ceil_log2(int64_t x) {
  if (x <= 2) return 1;
  int64_t bits = 0;
  for (uint64_t v = static_cast<uint64_t>(x) - 1; v != 0; v >>= 1) ++bits;
  return bits;
}

// multi_row_sum with nrows = 4: `rows` rows of 4 elements of type T (row i = load(4 i + k)); four
// levels of accumulators, each level flushed into the next every 2^level_power rows.
template <typename T, typename Load>
std::array<T, 4> multi_row_sum(int64_t rows, const Load& load, const T& zero) {
  constexpr int kLevels = 4;
  const int64_t level_power = std::max<int64_t>(4, ceil_log2(rows) / kLevels);
  const int64_t level_step = int64_t{1} << level_power;
  const int64_t level_mask = level_step - 1;
  T acc[kLevels][4];
  for (auto& level : acc)
    for (auto& a : level) a = zero;
  int64_t i = 0;
  for (; i + level_step <= rows;) {
    for (int64_t j = 0; j < level_step; ++j, ++i)
      for (int k = 0; k < 4; ++k) acc[0][k].add(load(4 * i + k));
    for (int j = 1; j < kLevels; ++j) {
      for (int k = 0; k < 4; ++k) {
        acc[j][k].add(acc[j - 1][k]);
        acc[j - 1][k] = zero;
      }
      if ((i & (level_mask << (j * level_power))) != 0) break;
    }
  }
  for (; i < rows; ++i)
    for (int k = 0; k < 4; ++k) acc[0][k].add(load(4 * i + k));
  for (int j = 1; j < kLevels; ++j)
    for (int k = 0; k < 4; ++k) acc[0][k].add(acc[j][k]);
  return {acc[0][0], acc[0][1], acc[0][2], acc[0][3]};
}

// row_sum: `size` items, item i = load(i), summed as (size / 4) rows of 4 plus a tail into lane 0.
template <typename T, typename Load>
T row_sum(int64_t size, const Load& load, const T& zero) {
  const int64_t rows = size / 4;
  std::array<T, 4> p = multi_row_sum<T>(rows, load, zero);
  for (int64_t i = rows * 4; i < size; ++i) p[0].add(load(i));
  for (int k = 1; k < 4; ++k) p[0].add(p[k]);
  return p[0];
}

struct Scalar {
  float v[1];
  void add(const Scalar& o) { v[0] += o.v[0]; }
};

template <int L>
float torch_sum(const float* x, int64_t n) {
  if (n < L) {  // too short for one vector: the scalar row_sum
    const Scalar s = row_sum<Scalar>(
        n, [&](int64_t i) { return Scalar{{x[i]}}; }, Scalar{{0.0f}});
    return 0.0f + s.v[0];
  }
  const int64_t vecs = n / L;
  Lanes<L> zero;
  std::fill(zero.v, zero.v + L, 0.0f);
  const Lanes<L> acc = row_sum<Lanes<L>>(
      vecs,
      [&](int64_t i) {
        Lanes<L> r;
        std::memcpy(r.v, x + i * L, sizeof(r.v));
        return r;
      },
      zero);
  float total = 0.0f;
  for (int64_t k = vecs * L; k < n; ++k) total += x[k];  // the scalar tail comes first
  for (int l = 0; l < L; ++l) total += acc.v[l];
  return 0.0f + total;  // the kernel accumulates into an output filled with 0
}

// absmax.mean() on the CPU: the sum, then a division by the count as fp32.
float torch_mean(const float* x, int64_t n) { return torch_sum<8>(x, n) / static_cast<float>(n); }

// torch.bucketize(t, midpoints) for the NF4 midpoints: how many are strictly below t (its lower
// bound search tests !(mid >= t), so NaN lands past the last midpoint, code 15).
int nf4_code(float t, const float* mid) {
  int c = 0;
  for (int j = 0; j < 15; ++j) c += !(mid[j] >= t);  // the midpoints are sorted: a count, branch-free
  return c;
}

float clamp1(float t) {  // torch.clamp(t, -1, 1): NaN stays NaN
  return t < -1.0f ? -1.0f : (t > 1.0f ? 1.0f : t);
}

}  // namespace

const float* dynamic_map() {
  static const std::array<float, 256> map = make_dynamic_map();
  return map.data();
}

size_t Quantized::bytes() const {
  size_t n = packed.size();
  if (double_quant)
    n += absmax_q.size() + absmax2.size() * sizeof(float) + sizeof(float);
  else
    n += absmax.size() * sizeof(float);
  return n;
}

float Quantized::block_absmax(int64_t b) const {
  if (!double_quant) return absmax[static_cast<size_t>(b)];
  const float scaled =
      dynamic_map()[absmax_q[static_cast<size_t>(b)]] * absmax2[static_cast<size_t>(b / kGroup)];
  return scaled + offset;
}

Quantized quantize(const float* x, int64_t numel, std::vector<int64_t> shape, bool double_quant) {
  if (numel <= 0) throw Error(ExitCode::kInternal, "nf4::quantize: an empty tensor cannot be quantised");
  int64_t shape_numel = 1;
  for (int64_t d : shape) shape_numel *= d;
  if (shape_numel != numel)
    throw Error(ExitCode::kInternal,
                "nf4::quantize: shape does not hold " + std::to_string(numel) + " elements");
  Quantized q;
  q.shape = std::move(shape);
  q.numel = numel;
  q.double_quant = double_quant;
  const int64_t blocks = q.blocks();
  const int64_t full = numel / kBlock;

  float mid[15];
  for (int j = 0; j < 15; ++j) mid[j] = (kCode[j] + kCode[j + 1]) / 2.0f;

  std::vector<float> absmax(static_cast<size_t>(blocks));
  q.packed.assign(static_cast<size_t>((numel + 1) / 2), 0);
  // Blocks are independent (and each starts on a byte: 64 is even), so they run in parallel.
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kBlock, end = std::min(begin + kBlock, numel);
    float m = std::fabs(x[begin]);
    for (int64_t i = begin + 1; i < end; ++i) {
      const float a = std::fabs(x[i]);
      if (std::isnan(a) || a > m) m = std::isnan(m) ? m : a;  // torch.max propagates NaN
    }
    uint8_t code[kBlock + 1];
    code[end - begin] = nf4_code(0.0f, mid);  // bitsandbytes pads an odd count with 0.0
    if (b < full) {
      absmax[static_cast<size_t>(b)] = m;
      const float recip = 1.0f / std::max(m, 1e-38f);
      for (int64_t i = begin; i < end; ++i)
        code[i - begin] = static_cast<uint8_t>(nf4_code(clamp1(x[i] * recip), mid));
    } else {  // the short last block: clamped absmax, a true division
      const float am = std::isnan(m) ? m : std::max(m, 1e-38f);
      absmax[static_cast<size_t>(b)] = am;
      for (int64_t i = begin; i < end; ++i)
        code[i - begin] = static_cast<uint8_t>(nf4_code(clamp1(x[i] / am), mid));
    }
    for (int64_t i = begin; i < end; i += 2)
      q.packed[static_cast<size_t>(i >> 1)] =
          static_cast<uint8_t>((code[i - begin] << 4) | code[i - begin + 1]);
  }

  if (!double_quant) {
    q.absmax = std::move(absmax);
    return q;
  }
  q.offset = torch_mean(absmax.data(), blocks);
  static const std::vector<uint8_t> lut = make_dynamic_lut();
  const int64_t groups = (blocks + kGroup - 1) / kGroup;
  q.absmax_q.assign(static_cast<size_t>(blocks), 0);
  q.absmax2.assign(static_cast<size_t>(groups), 0.0f);
  std::vector<float> v(kGroup);
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t begin = g * kGroup, end = std::min(begin + kGroup, blocks);
    float m = 0.0f;  // the binary's max over the group, then max with 0
    for (int64_t b = begin; b < end; ++b) {
      v[static_cast<size_t>(b - begin)] = absmax[static_cast<size_t>(b)] - q.offset;
      const float a = std::fabs(v[static_cast<size_t>(b - begin)]);
      if (a > m) m = a;
    }
    q.absmax2[static_cast<size_t>(g)] = m;
    if (m == 0.0f) continue;  // codes stay 0
    const float inv = 1.0f / m;
    for (int64_t b = begin; b < end; ++b) {
      const float t = clamp1(v[static_cast<size_t>(b - begin)] * inv);
      const float f = std::fma((t + 1.0f) * 0.5f, 65535.0f, 0.5f);
      // cvttss2si, then the low 16 bits; NaN gives 0x80000000, i.e. index 0
      const int32_t i32 = std::isnan(f) ? INT32_MIN : static_cast<int32_t>(f);
      q.absmax_q[static_cast<size_t>(b)] = lut[static_cast<uint16_t>(i32)];
    }
  }
  return q;
}

void dequantize(const Quantized& q, float* out) {
  const int64_t blocks = q.blocks();
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const float a = q.block_absmax(b);
    const int64_t begin = b * kBlock, end = std::min(begin + kBlock, q.numel);
    for (int64_t i = begin; i < end; ++i) {
      const uint8_t byte = q.packed[static_cast<size_t>(i >> 1)];
      out[i] = kCode[(i & 1) ? (byte & 0x0F) : (byte >> 4)] * a;
    }
  }
}

}  // namespace flotilla::nf4
