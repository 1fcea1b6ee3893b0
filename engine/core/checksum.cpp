// CRC-32C: slicing-by-8 tables plus an SSE4.2 path chosen once at run time.
//
// The tables are built at first use from the reflected Castagnoli polynomial 0x82F63B78; table k
// maps a byte to its CRC contribution when followed by k zero bytes, so eight bytes fold per step.
#include "engine/core/checksum.h"

#include <array>
#include <bit>
#include <cstdio>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define FLOTILLA_CRC32C_X86 1
#endif

namespace flotilla {
namespace {

static_assert(std::endian::native == std::endian::little, "crc32c slicing-by-8 assumes a little-endian host");

constexpr uint32_t kPolyReflected = 0x82F63B78u;

using Tables = std::array<std::array<uint32_t, 256>, 8>;

Tables make_tables() {
  Tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int b = 0; b < 8; ++b) c = (c & 1u) ? (c >> 1) ^ kPolyReflected : c >> 1;
    t[0][i] = c;
  }
  for (int k = 1; k < 8; ++k)
    for (uint32_t i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFFu];
  return t;
}

const Tables& tables() {
  static const Tables t = make_tables();
  return t;
}

#if FLOTILLA_CRC32C_X86
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const uint8_t* p, size_t n, uint32_t c) {
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7u) != 0) {
    c = _mm_crc32_u8(c, *p++);
    --n;
  }
  uint64_t c64 = c;
  while (n >= 32) {  // unrolled: the instruction has 3-cycle latency, 1/cycle throughput per chain
    uint64_t w[4];
    std::memcpy(w, p, 32);
    c64 = _mm_crc32_u64(c64, w[0]);
    c64 = _mm_crc32_u64(c64, w[1]);
    c64 = _mm_crc32_u64(c64, w[2]);
    c64 = _mm_crc32_u64(c64, w[3]);
    p += 32;
    n -= 32;
  }
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c64 = _mm_crc32_u64(c64, w);
    p += 8;
    n -= 8;
  }
  c = static_cast<uint32_t>(c64);
  while (n-- > 0) c = _mm_crc32_u8(c, *p++);
  return c;
}

bool detect_sse42() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("sse4.2");
}
#endif

uint32_t crc32c_tables(const uint8_t* p, size_t n, uint32_t c) {
  const Tables& t = tables();
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    w ^= c;
    c = t[7][w & 0xFFu] ^ t[6][(w >> 8) & 0xFFu] ^ t[5][(w >> 16) & 0xFFu] ^ t[4][(w >> 24) & 0xFFu] ^
        t[3][(w >> 32) & 0xFFu] ^ t[2][(w >> 40) & 0xFFu] ^ t[1][(w >> 48) & 0xFFu] ^ t[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFFu];
  return c;
}

}  // namespace

bool crc32c_hardware_available() {
#if FLOTILLA_CRC32C_X86
  static const bool available = detect_sse42();
  return available;
#else
  return false;
#endif
}

uint32_t crc32c_portable(const void* data, size_t size, uint32_t crc) {
  return ~crc32c_tables(static_cast<const uint8_t*>(data), size, ~crc);
}

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
#if FLOTILLA_CRC32C_X86
  if (crc32c_hardware_available()) return ~crc32c_sse42(static_cast<const uint8_t*>(data), size, ~crc);
#endif
  return crc32c_portable(data, size, crc);
}

std::string crc32c_hex(uint32_t crc) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", crc);
  return buf;
}

bool parse_crc32c_hex(const std::string& text, uint32_t* out) {
  if (text.size() != 8) return false;
  uint32_t v = 0;
  for (char ch : text) {
    uint32_t d;
    if (ch >= '0' && ch <= '9')
      d = static_cast<uint32_t>(ch - '0');
    else if (ch >= 'a' && ch <= 'f')
      d = static_cast<uint32_t>(ch - 'a' + 10);
    else if (ch >= 'A' && ch <= 'F')
      d = static_cast<uint32_t>(ch - 'A' + 10);
    else
      return false;
    v = (v << 4) | d;
  }
  *out = v;
  return true;
}

}  // namespace flotilla
