// CRC-32C (Castagnoli), the checksum of checkpoint manifests (docs/reliability.md §1 rule 4).
//
// Decision: CRC-32C rather than a 64-bit hash, because it is a standard (iSCSI, ext4, Btrfs, GCS
// object checksums), `crc32c` tools exist to check a file by hand, and the SSE4.2 instruction makes
// it nearly free. A portable slicing-by-8 table version is always built; the hardware path is picked
// at run time on x86-64 CPUs that have SSE4.2, and both give identical results (tested).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace flotilla {

// CRC-32C of `size` bytes, continuing from `crc` (pass the previous result to checksum a stream in
// pieces; 0 for the first piece). crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

// The portable table-driven implementation (slicing-by-8), for tests and non-x86 builds.
uint32_t crc32c_portable(const void* data, size_t size, uint32_t crc = 0);

// True when crc32c() uses the SSE4.2 crc32 instruction on this machine.
bool crc32c_hardware_available();

// "e3069283": the 8-digit lower-case hex form used in MANIFEST files.
std::string crc32c_hex(uint32_t crc);

// Parses crc32c_hex()'s form; false when `text` is not exactly 8 hex digits.
bool parse_crc32c_hex(const std::string& text, uint32_t* out);

}  // namespace flotilla
