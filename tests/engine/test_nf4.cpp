// NF4 quantisation against bitsandbytes 0.50.2 (tests/engine/golden/qlora/quant/, made by
// tests/reference/make_qlora_goldens.py): the code tables, and for every golden tensor (random,
// edge cases, bf16/fp16 inputs, real-shaped and 4096x4096 generated weights) the packed bytes, the
// block absmaxes, the double-quantised statistics (offset, 8-bit codes, group absmaxes) and the
// dequantised values, every bit equal, with and without double quantisation. Then properties that
// hold whatever bitsandbytes does: the round trip error bound, the nearest-code rule up to the
// reciprocal's rounding, the packing order, the size in bits per parameter, and the kernel View
// reading the same codes and absmaxes as the Quantized, for the whole module and for a slice.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <omp.h>
#include <nlohmann/json.hpp>

#include "check.h"
#include "engine/core/checksum.h"
#include "engine/core/nf4.h"
#include "engine/interop/safetensors.h"

using namespace flotilla;
namespace nf4 = flotilla::nf4;

namespace {

const std::string kDir = std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/qlora/quant/";

// Bit for bit, except that any NaN equals any NaN (the nonfinite case: payloads are not the point).
bool same_bits(const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (std::memcmp(a + i, b + i, sizeof(float)) != 0 && !(std::isnan(a[i]) && std::isnan(b[i])))
      return false;
  return true;
}

size_t first_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (a[i] != b[i]) return i;
  return a.size() == b.size() ? SIZE_MAX : std::min(a.size(), b.size());
}

// The golden generator (make_qlora_goldens.py `generated`): splitmix64 per element, every value exact.
std::vector<float> generated(uint64_t seed, int64_t rows, int64_t cols) {
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows * cols; ++i) {
    uint64_t z = seed + static_cast<uint64_t>(i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    int64_t s = 0;
    for (int k = 0; k < 4; ++k) s += static_cast<int64_t>((z >> (16 * k)) & 0xFFFF);
    double v = static_cast<double>(s - 131070) * std::ldexp(1.0, -21);
    if ((z >> 56) == 0) v *= 16.0;
    v *= std::ldexp(1.0, static_cast<int>((i / cols) % 7) - 3);
    x[static_cast<size_t>(i)] = static_cast<float>(v);
  }
  return x;
}

std::vector<float> floats(const interop::SafetensorsFile& f, const std::string& name) {
  const interop::SafetensorsEntry* e = f.find(name);
  CHECK_MSG(e != nullptr, "%s has no tensor %s", f.path().c_str(), name.c_str());
  return e != nullptr ? f.read_f32(*e) : std::vector<float>{};
}

std::vector<uint8_t> bytes_of(const interop::SafetensorsFile& f, const std::string& name) {
  const interop::SafetensorsEntry* e = f.find(name);
  CHECK_MSG(e != nullptr && e->dtype == "U8", "%s has no U8 tensor %s", f.path().c_str(), name.c_str());
  return e != nullptr ? f.read_raw(*e) : std::vector<uint8_t>{};
}

std::string crc_of(const void* p, size_t n) { return crc32c_hex(crc32c(p, n)); }

void check_maps() {
  const interop::SafetensorsFile f(kDir + "maps.safetensors");
  const std::vector<float> code = floats(f, "nf4_code"), dmap = floats(f, "dynamic_map");
  CHECK(code.size() == 16 && same_bits(code.data(), nf4::kCode, 16));
  CHECK(dmap.size() == 256);
  int differ = 0;
  for (size_t i = 0; i < dmap.size(); ++i)
    if (std::memcmp(&dmap[i], &nf4::dynamic_map()[i], sizeof(float)) != 0) {
      if (++differ <= 5)
        std::fprintf(stderr, "dynamic_map[%zu]: ours %.9g, bitsandbytes %.9g\n", i, nf4::dynamic_map()[i],
                     dmap[i]);
    }
  CHECK_MSG(differ == 0, "%d of 256 dynamic map values differ from bitsandbytes'", differ);
}

// Properties of one quantised tensor against its input (independent of the goldens).
void check_properties(const std::string& name, const std::vector<float>& x, const nf4::Quantized& q0,
                      const nf4::Quantized& q1) {
  float max_gap = 0;  // the widest gap between neighbouring NF4 codes (0.7229 .. 1)
  for (int j = 0; j < 15; ++j) max_gap = std::max(max_gap, nf4::kCode[j + 1] - nf4::kCode[j]);
  float dyn_gap = 0;
  for (int j = 0; j < 255; ++j)
    dyn_gap = std::max(dyn_gap, nf4::dynamic_map()[j + 1] - nf4::dynamic_map()[j]);
  std::vector<float> d0(x.size()), d1(x.size());
  nf4::dequantize(q0, d0.data());
  nf4::dequantize(q1, d1.data());
  int64_t bad_bound = 0, bad_nearest = 0, bad_absmax = 0;
  double worst_rel = 0;
  for (int64_t b = 0; b < q0.blocks(); ++b) {
    const int64_t begin = b * nf4::kBlock, end = std::min<int64_t>(begin + nf4::kBlock, q0.numel);
    float m = 0;
    for (int64_t i = begin; i < end; ++i) m = std::max(m, std::fabs(x[static_cast<size_t>(i)]));
    if (q0.absmax[static_cast<size_t>(b)] != m && !(m == 0 && b == q0.blocks() - 1)) ++bad_absmax;
    for (int64_t i = begin; i < end; ++i) {
      const float xi = x[static_cast<size_t>(i)];
      // within half the widest code gap of the block's scale (plus rounding)
      if (std::fabs(xi - d0[static_cast<size_t>(i)]) > (0.5f * max_gap) * m * (1 + 1e-5f) + 1e-37f)
        ++bad_bound;
      // the chosen code is the nearest one, up to the rounding of x * (1 / absmax)
      if (m > 0) {
        const uint8_t byte = q0.packed[static_cast<size_t>(i >> 1)];
        const int c = (i & 1) ? (byte & 15) : (byte >> 4);
        const double t = static_cast<double>(xi) / m;
        for (int k = 0; k < 16; ++k)
          if (std::fabs(t - nf4::kCode[k]) + 1e-6 < std::fabs(t - nf4::kCode[c])) {
            ++bad_nearest;
            break;
          }
      }
    }
    // double quantisation: the 8-bit absmax is within half a map gap (plus the 2^-16 grid) of the group's
    // scale
    const float a2 = q1.absmax2[static_cast<size_t>(b / nf4::kGroup)];
    const double err = std::fabs(static_cast<double>(q1.block_absmax(b)) - m);
    if (err > a2 * (0.5 * dyn_gap + 2.0 / 65535) * (1 + 1e-5) + 1e-7 * std::fabs(q1.offset)) ++bad_absmax;
    if (a2 > 0) worst_rel = std::max(worst_rel, err / a2);
  }
  CHECK_MSG(bad_bound == 0, "%s: %lld values outside the round-trip bound", name.c_str(),
            (long long)bad_bound);
  CHECK_MSG(bad_nearest == 0, "%s: %lld values not on the nearest code", name.c_str(),
            (long long)bad_nearest);
  CHECK_MSG(bad_absmax == 0, "%s: %lld block absmaxes off", name.c_str(), (long long)bad_absmax);
  // packing: element 2i in the high nibble; an odd count ends with bitsandbytes' pad code 7
  if (q0.numel & 1) CHECK((q0.packed.back() & 15) == 7);
  CHECK(q0.packed.size() == static_cast<size_t>((q0.numel + 1) / 2));
  std::printf("%s: %lld elements, worst double-quantised absmax error %.3g of its group absmax\n",
              name.c_str(), (long long)q0.numel, worst_rel);
}

// The kernel's View of a [rows x cols] slice reads what the Quantized holds.
void check_view(const nf4::Quantized& q, int64_t out, int64_t in, int64_t row0, int rows, int cb0, int cols) {
  const int64_t mcb = in / nf4::kBlock;
  std::vector<uint8_t> packed(static_cast<size_t>(rows) * cols / 2),
      aq(static_cast<size_t>(rows) * cols / 64);
  std::vector<float> am(aq.size());
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; c += 2) {
      const int64_t i = (row0 + r) * in + cb0 * nf4::kBlock + c;
      packed[static_cast<size_t>((static_cast<int64_t>(r) * cols + c) / 2)] =
          q.packed[static_cast<size_t>(i / 2)];
    }
    for (int cb = 0; cb < cols / 64; ++cb) {
      const int64_t b = (row0 + r) * mcb + cb0 + cb;
      if (q.double_quant)
        aq[static_cast<size_t>(r * (cols / 64) + cb)] = q.absmax_q[static_cast<size_t>(b)];
      else
        am[static_cast<size_t>(r * (cols / 64) + cb)] = q.absmax[static_cast<size_t>(b)];
    }
  }
  (void)out;
  nf4::View v;
  v.rows = rows;
  v.cols = cols;
  v.packed = packed.data();
  v.absmax_q = q.double_quant ? aq.data() : nullptr;
  v.absmax = q.double_quant ? nullptr : am.data();
  v.absmax2 = q.absmax2.data();
  v.code2 = nf4::dynamic_map();
  v.offset = q.offset;
  v.row0 = row0;
  v.cb0 = cb0;
  v.module_cblocks = static_cast<int>(mcb);
  int bad = 0;
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const int64_t i = (row0 + r) * in + cb0 * nf4::kBlock + c;
      const uint8_t byte = q.packed[static_cast<size_t>(i >> 1)];
      const int want = (i & 1) ? (byte & 15) : (byte >> 4);
      const float wa = q.block_absmax(i / nf4::kBlock), ga = nf4::view_absmax(v, r, c / nf4::kBlock);
      if (nf4::view_code(v, r, c) != want || std::memcmp(&wa, &ga, 4) != 0) ++bad;
    }
  CHECK_MSG(bad == 0, "View [%lld + %d rows, block %d + %d cols]: %d elements read differently",
            (long long)row0, rows, cb0, cols, bad);
}

void check_case(const std::string& name) {
  const interop::SafetensorsFile f(kDir + name + ".safetensors");
  const auto& meta = f.metadata();
  const int64_t numel = std::stoll(meta.at("numel"));
  const std::vector<int64_t> shape = nlohmann::json::parse(meta.at("shape")).get<std::vector<int64_t>>();
  std::vector<float> x;
  if (meta.count("generator")) {
    unsigned long long seed = 0;
    long long rows = 0, cols = 0;
    CHECK(std::sscanf(meta.at("generator").c_str(), "splitmix64 seed=%llu rows=%lld cols=%lld", &seed, &rows,
                      &cols) == 3);
    x = generated(seed, rows, cols);
  } else {
    x = floats(f, "input");  // bf16/fp16 widened exactly: what bitsandbytes quantises too
  }
  CHECK(static_cast<int64_t>(x.size()) == numel);
  const auto t0 = std::chrono::steady_clock::now();
  const nf4::Quantized q1 = nf4::quantize(x.data(), numel, shape, true);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (numel > 1000000)
    std::printf("%s: quantize (double quant) %.1f ms, %.2f ns per element\n", name.c_str(), ms,
                ms * 1e6 / numel);
  const nf4::Quantized q0 = nf4::quantize(x.data(), numel, shape, false);
  CHECK(q1.shape == shape && q1.numel == numel && q1.packed == q0.packed);
  CHECK(q1.blocks() == (numel + 63) / 64 && q1.absmax_q.size() == static_cast<size_t>(q1.blocks()));
  CHECK(q1.absmax2.size() == static_cast<size_t>((q1.blocks() + 255) / 256) && q0.absmax2.empty());

  // offset and group absmaxes are stored in full for every case
  const std::vector<float> offset = floats(f, "offset"), absmax2 = floats(f, "absmax2");
  CHECK_MSG(offset.size() == 1 && same_bits(&offset[0], &q1.offset, 1), "%s: offset %.9g, bitsandbytes %.9g",
            name.c_str(), q1.offset, offset.empty() ? 0.f : offset[0]);
  CHECK_MSG(
      absmax2.size() == q1.absmax2.size() && same_bits(absmax2.data(), q1.absmax2.data(), absmax2.size()),
      "%s: absmax2 differs", name.c_str());

  std::vector<float> d0(static_cast<size_t>(numel)), d1(static_cast<size_t>(numel));
  nf4::dequantize(q0, d0.data());
  nf4::dequantize(q1, d1.data());
  if (meta.count("crc32c.packed")) {
    CHECK_MSG(crc_of(q1.packed.data(), q1.packed.size()) == meta.at("crc32c.packed"), "%s: packed",
              name.c_str());
    CHECK_MSG(crc_of(q0.absmax.data(), q0.absmax.size() * 4) == meta.at("crc32c.absmax"), "%s: absmax",
              name.c_str());
    CHECK_MSG(crc_of(q1.absmax_q.data(), q1.absmax_q.size()) == meta.at("crc32c.absmax_q"), "%s: absmax_q",
              name.c_str());
  } else {
    const std::vector<uint8_t> packed = bytes_of(f, "packed"), absmax_q = bytes_of(f, "absmax_q");
    const size_t pd = first_difference(q1.packed, packed), qd = first_difference(q1.absmax_q, absmax_q);
    CHECK_MSG(pd == SIZE_MAX, "%s: packed byte %zu of %zu differs", name.c_str(), pd, packed.size());
    CHECK_MSG(qd == SIZE_MAX, "%s: absmax_q %zu of %zu differs", name.c_str(), qd, absmax_q.size());
    const std::vector<float> absmax = floats(f, "absmax");
    CHECK_MSG(absmax.size() == q0.absmax.size() && same_bits(absmax.data(), q0.absmax.data(), absmax.size()),
              "%s: absmax differs", name.c_str());
  }
  if (meta.count("crc32c.dequant_dq")) {
    CHECK_MSG(crc_of(d1.data(), d1.size() * 4) == meta.at("crc32c.dequant_dq"), "%s: dequant (dq)",
              name.c_str());
    CHECK_MSG(crc_of(d0.data(), d0.size() * 4) == meta.at("crc32c.dequant_nodq"), "%s: dequant",
              name.c_str());
  } else {
    const std::vector<float> g1 = floats(f, "dequant_dq"), g0 = floats(f, "dequant_nodq");
    CHECK_MSG(g1.size() == d1.size() && same_bits(g1.data(), d1.data(), d1.size()),
              "%s: dequant (dq) differs", name.c_str());
    CHECK_MSG(g0.size() == d0.size() && same_bits(g0.data(), d0.data(), d0.size()), "%s: dequant differs",
              name.c_str());
  }
  // a bf16/fp16 model's dequantised weight: our fp32 values rounded to nearest even
  if (const interop::SafetensorsEntry* e = f.find("dequant_dq_native")) {
    const std::vector<uint8_t> raw = f.read_raw(*e);
    int bad = 0;
    for (size_t i = 0; i < d1.size(); ++i) {
      uint16_t want = 0, got = 0;
      std::memcpy(&want, raw.data() + 2 * i, 2);
      if (e->dtype == "BF16") {
        got = interop::f32_to_bf16(d1[i]);
      } else {
        const _Float16 h = static_cast<_Float16>(d1[i]);
        std::memcpy(&got, &h, 2);
      }
      if (got != want) ++bad;
    }
    CHECK_MSG(bad == 0, "%s: %d %s dequantised values differ", name.c_str(), bad, e->dtype.c_str());
  }
  if (name != "nonfinite_f32") check_properties(name, x, q0, q1);
  // the kernel View, where the tensor is a [out x in] matrix with in % 64 == 0
  if (shape.size() == 2 && shape[1] % 64 == 0 && shape[0] >= 4 && shape[1] >= 128) {
    for (const nf4::Quantized* q : {&q0, &q1}) {
      check_view(*q, shape[0], shape[1], 0, static_cast<int>(shape[0]), 0, static_cast<int>(shape[1]));
      check_view(*q, shape[0], shape[1], shape[0] / 2, static_cast<int>(shape[0] / 4), 1, 64);
    }
  }
}

void check_sizes() {
  // QLoRA's 4.127 bits per parameter: 4 + 8/64 + 32/(64*256) (+ the offset)
  const std::vector<float> x = generated(576001, 576, 576);
  const nf4::Quantized q1 = nf4::quantize(x.data(), 576 * 576, {576, 576}, true);
  const nf4::Quantized q0 = nf4::quantize(x.data(), 576 * 576, {576, 576}, false);
  CHECK(q1.bytes() == 576 * 576 / 2 + 5184 + 21 * 4 + 4);
  CHECK(q0.bytes() == 576 * 576 / 2 + 5184 * 4);
  const double bits = 8.0 * static_cast<double>(q1.bytes()) / (576 * 576);
  CHECK_NEAR(bits, 4.127, 0.001);
  std::printf("576x576: %zu bytes double-quantised (%.4f bits/param), %zu without\n", q1.bytes(), bits,
              q0.bytes());
  CHECK_THROWS(nf4::quantize(x.data(), 10, {3, 3}, true), "shape");
  // blocks run in parallel: the bytes do not depend on the thread count
  const int threads = omp_get_max_threads();
  for (int t : {1, 3, 8}) {
    omp_set_num_threads(t);
    const nf4::Quantized qt = nf4::quantize(x.data(), 576 * 576, {576, 576}, true);
    CHECK_MSG(qt.packed == q1.packed && qt.absmax_q == q1.absmax_q && qt.absmax2 == q1.absmax2 &&
                  qt.offset == q1.offset,
              "%d threads quantise differently", t);
  }
  omp_set_num_threads(threads);
}

}  // namespace

int main() {
  check_maps();
  for (const char* name : {"small_f32", "odd_f32", "edge_f32", "groups_f32", "bf16", "f16", "nonfinite_f32",
                           "real_576x576", "real_1536x576", "large_4096x4096"})
    check_case(name);
  check_sizes();
  return flotilla_test::summary("test_nf4");
}
