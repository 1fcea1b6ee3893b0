// Random NF4 modules for the kernel tests (tests/engine/test_nf4_kernels.cpp, tests/gpu/): one
// module's [out x in] quantised weight as bitsandbytes lays it out (random codes, random fp32
// statistics, the tests' own nested code table), Views of [rows x cols] slices of it at (row0, cb0)
// as a tensor-parallel rank holds them, and the slice's values by nf4.h's formula read from the
// MODULE's arrays, so the View's group indexing is checked, not assumed.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/core/nf4.h"

namespace nf4_test {

using namespace flotilla;

inline uint32_t g_seed = 1u;
inline uint32_t rnd_u32() {
  g_seed = g_seed * 1664525u + 1013904223u;
  return g_seed;
}
inline float rnd() { return static_cast<float>((rnd_u32() >> 8) & 0xffff) / 32768.0f - 1.0f; }

// One module's [out x in] quantised weight as bitsandbytes lays it out (random contents).
struct Module {
  int out = 0, in = 0;
  bool dq = true;
  std::vector<uint8_t> packed;    // out * in / 2
  std::vector<float> absmax;      // !dq: one per block
  std::vector<uint8_t> absmax_q;  // dq: one per block
  std::vector<float> absmax2;     // dq: one per 256 blocks
  std::vector<float> code2;       // dq: this test's own nested table
  float offset = 0;
};

inline Module make_module(int out, int in, bool dq, uint32_t seed) {
  g_seed = seed;
  Module m;
  m.out = out, m.in = in, m.dq = dq;
  const int64_t blocks = static_cast<int64_t>(out) * in / nf4::kBlock;
  m.packed.resize(static_cast<size_t>(out) * in / 2);
  for (auto& b : m.packed) b = static_cast<uint8_t>(rnd_u32() >> 24);
  if (dq) {
    m.absmax_q.resize(blocks);
    for (auto& q : m.absmax_q) q = static_cast<uint8_t>(rnd_u32() >> 24);
    m.absmax2.resize((blocks + nf4::kGroup - 1) / nf4::kGroup);
    for (auto& a : m.absmax2) a = 0.02f + 0.01f * rnd();
    m.code2.resize(256);
    for (auto& c : m.code2) c = rnd();
    m.offset = 0.05f + 0.001f * rnd();
  } else {
    m.absmax.resize(blocks);
    for (auto& a : m.absmax) a = 0.03f + 0.02f * rnd();
  }
  return m;
}

// A [rows x cols] slice at (row0, cb0): slice-local codes and absmax, the module's groups.
struct Slice {
  nf4::View v;
  std::vector<uint8_t> packed, absmax_q;
  std::vector<float> absmax;
};

inline Slice make_slice(const Module& m, int row0, int rows, int cb0, int cols) {
  Slice s;
  const int cb = cols / nf4::kBlock, mcb = m.in / nf4::kBlock;
  for (int r = 0; r < rows; ++r) {
    const size_t at = (static_cast<size_t>(row0 + r) * m.in + static_cast<size_t>(cb0) * nf4::kBlock) / 2;
    s.packed.insert(s.packed.end(), m.packed.begin() + at, m.packed.begin() + at + cols / 2);
    for (int b = 0; b < cb; ++b) {
      const size_t blk = static_cast<size_t>(row0 + r) * mcb + cb0 + b;
      if (m.dq)
        s.absmax_q.push_back(m.absmax_q[blk]);
      else
        s.absmax.push_back(m.absmax[blk]);
    }
  }
  s.v.rows = rows, s.v.cols = cols, s.v.packed = s.packed.data();
  if (m.dq) {
    s.v.absmax_q = s.absmax_q.data(), s.v.absmax2 = m.absmax2.data(), s.v.code2 = m.code2.data();
    s.v.offset = m.offset;
  } else {
    s.v.absmax = s.absmax.data();
  }
  s.v.row0 = row0, s.v.cb0 = cb0, s.v.module_cblocks = mcb;
  return s;
}

// The slice's values by nf4.h's formula, read from the MODULE's arrays (not the slice's).
inline std::vector<float> reference_weights(const Module& m, int row0, int rows, int cb0, int cols) {
  std::vector<float> w(static_cast<size_t>(rows) * cols);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      const int64_t gr = row0 + r, gc = static_cast<int64_t>(cb0) * nf4::kBlock + c;
      const int64_t i = gr * m.in + gc, blk = i / nf4::kBlock;
      float a;
      if (m.dq) {
        volatile float scaled = m.code2[m.absmax_q[blk]] * m.absmax2[blk / nf4::kGroup];
        a = scaled + m.offset;
      } else {
        a = m.absmax[blk];
      }
      const uint8_t byte = m.packed[i / 2];
      w[static_cast<size_t>(r) * cols + c] = nf4::kCode[(i & 1) ? (byte & 0x0F) : (byte >> 4)] * a;
    }
  return w;
}

}  // namespace nf4_test
