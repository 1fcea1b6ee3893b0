// The safetensors container format, read and written by our own code.
//
//   u64 little-endian N | N bytes of UTF-8 JSON header | raw tensor bytes
//   header: {"<name>": {"dtype": "F32", "shape": [r, c], "data_offsets": [begin, end]}, ...,
//            "__metadata__": {"format": "pt", ...string values...}}
// Offsets are relative to the first byte after the header. Writers pad the header with spaces so the
// data starts at a multiple of 8.
//
// Decision: the reader is as strict as the reference implementation (offsets must tile the data
// exactly, no overlaps, no gaps, byte counts must equal shape × dtype size), so a file we accept is
// one `safetensors` accepts too, and a damaged file fails with the tensor named.
//
// Decision: the file is memory-mapped read-only and read_f32_into() converts a tensor straight from
// the map into the caller's buffer, a few MiB at a time, releasing each finished span of pages
// (MADV_DONTNEED) as it goes: a 16 GB checkpoint never has a second copy in memory, not even as
// file-backed resident pages of this process. Only the tensors asked for are ever paged in. If the
// map cannot be made, the same calls fall back to pread through a small bounce buffer.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace flotilla::interop {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", "F64", "I64", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // data_offsets, relative to the data section
};

// Bytes per element of a safetensors dtype name; 0 when unknown.
size_t safetensors_dtype_size(const std::string& dtype);

// "[768, 2304]"
std::string shape_string(const std::vector<int64_t>& shape);

class SafetensorsFile {
 public:
  // Reads and validates the header. Throws Error(kData) naming the file and the fault.
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }  // in offset order
  const SafetensorsEntry* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The tensor's elements converted to fp32 (F32, F16, BF16 and F64 are supported).
  std::vector<float> read_f32(const SafetensorsEntry& entry) const;
  // The same conversion into dst (numel(entry.shape) floats), straight from the memory map. Throws
  // Error(kData) for another dtype. Thread-safe: several threads may read different tensors at once.
  void read_f32_into(const SafetensorsEntry& entry, float* dst) const;
  // The tensor's raw bytes.
  std::vector<uint8_t> read_raw(const SafetensorsEntry& entry) const;

 private:
  std::string path_;
  int fd_ = -1;
  const uint8_t* map_ = nullptr;  // the whole file, PROT_READ; null when mmap failed (pread fallback)
  uint64_t map_bytes_ = 0;
  uint64_t data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Parses a header JSON against a data section of `data_bytes`; throws Error(kData) with `label`.
// (The file reader's core, exposed for tests and fuzzing.)
void parse_safetensors_header(const std::string& json_text, uint64_t data_bytes, const std::string& label,
                              std::vector<SafetensorsEntry>* entries,
                              std::map<std::string, std::string>* metadata);

struct SafetensorsOutTensor {
  std::string name;
  std::string dtype = "F32";
  std::vector<int64_t> shape;
  const void* data = nullptr;           // either the bytes ...
  std::function<void(void* dst)> fill;  // ... or a producer writing shape × dtype bytes to dst
};

// The bytes before the data section for `tensors` laid out back to back in the given order: the u64
// header length and the JSON header, padded with spaces so the data starts at a multiple of 8.
// *data_bytes receives the size of the data section. Throws Error(kInternal) for a bad tensor entry
// (unknown dtype, duplicate name, negative dimension).
std::string safetensors_header_block(const std::vector<SafetensorsOutTensor>& tensors,
                                     const std::map<std::string, std::string>& metadata,
                                     uint64_t* data_bytes);

// Writes `tensors` in the given order, crash-safely: PATH.tmp-<hex>, checked writes, fsync, rename,
// fsync of the directory. Throws Error(kIo) naming the file on failure (the tmp file is removed).
void write_safetensors(const std::string& path, const std::vector<SafetensorsOutTensor>& tensors,
                       const std::map<std::string, std::string>& metadata);

// IEEE half / bfloat16 to float (exact: every code maps to its value, NaN stays NaN).
float f16_to_f32(uint16_t h);
float bf16_to_f32(uint16_t b);
// float to bfloat16, rounding to nearest even; every NaN becomes the quiet NaN 0x7FC0 (as PyTorch).
uint16_t f32_to_bf16(float f);

}  // namespace flotilla::interop
