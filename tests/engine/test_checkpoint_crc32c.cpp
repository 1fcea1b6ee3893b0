// CRC-32C: published check values, streaming in pieces, and the SSE4.2 path against the portable
// slicing-by-8 tables on random data at every alignment.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "engine/core/checksum.h"

using namespace flotilla;

// Bit-at-a-time reference straight from the definition (reflected polynomial 0x82F63B78).
static uint32_t crc32c_bitwise(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int b = 0; b < 8; ++b) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

int main() {
  // Check values: RFC 3720 (iSCSI) appendix B.4 and the CRC catalogue's "123456789".
  const std::string digits = "123456789";
  CHECK(crc32c(digits.data(), digits.size()) == 0xE3069283u);
  CHECK(crc32c_portable(digits.data(), digits.size()) == 0xE3069283u);
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF), inc(32), dec(32);
  for (int i = 0; i < 32; ++i) {
    inc[i] = static_cast<uint8_t>(i);
    dec[i] = static_cast<uint8_t>(31 - i);
  }
  CHECK(crc32c(zeros.data(), 32) == 0x8A9136AAu);
  CHECK(crc32c(ones.data(), 32) == 0x62A8AB43u);
  CHECK(crc32c(inc.data(), 32) == 0x46DD794Eu);
  CHECK(crc32c(dec.data(), 32) == 0x113FDB5Cu);
  CHECK(crc32c(nullptr, 0) == 0u);

  // Random data: hardware (when present), tables and the bitwise definition agree for every length
  // 0..300 at offsets 0..7, and checksumming in two pieces equals one pass.
  std::vector<uint8_t> buf(4096 + 16);
  uint64_t x = 88172645463325252ull;
  for (auto& b : buf) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<uint8_t>(x);
  }
  int mismatches = 0;
  for (size_t off = 0; off < 8; ++off)
    for (size_t len = 0; len <= 300; ++len) {
      const uint32_t ref = crc32c_bitwise(buf.data() + off, len);
      if (crc32c(buf.data() + off, len) != ref || crc32c_portable(buf.data() + off, len) != ref) ++mismatches;
      const size_t cut = len / 3;
      if (crc32c(buf.data() + off + cut, len - cut, crc32c(buf.data() + off, cut)) != ref) ++mismatches;
    }
  CHECK_MSG(mismatches == 0, "%d mismatching lengths/offsets", mismatches);
  CHECK(crc32c(buf.data(), 4096) == crc32c_bitwise(buf.data(), 4096));
  std::printf("crc32c hardware path: %s\n", crc32c_hardware_available() ? "SSE4.2" : "none (tables)");

  // A one-bit change is always detected.
  const uint32_t before = crc32c(buf.data(), 4096);
  buf[1234] ^= 0x10;
  CHECK(crc32c(buf.data(), 4096) != before);

  // Hex form used in MANIFEST files.
  CHECK(crc32c_hex(0xE3069283u) == "e3069283");
  CHECK(crc32c_hex(0x1u) == "00000001");
  uint32_t parsed = 0;
  CHECK(parse_crc32c_hex("e3069283", &parsed) && parsed == 0xE3069283u);
  CHECK(parse_crc32c_hex("E3069283", &parsed) && parsed == 0xE3069283u);
  CHECK(!parse_crc32c_hex("e306928", &parsed));
  CHECK(!parse_crc32c_hex("e306928g", &parsed));
  CHECK(!parse_crc32c_hex("0xe30692", &parsed));
  return flotilla_test::summary("test_checkpoint_crc32c");
}
