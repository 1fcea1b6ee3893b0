// The per-rank checkpoint file rank-R.bin: a fixed header plus named tensor sections.
//
//   header (64 bytes, little-endian):
//     0  char[8] "FLTCKPT1"      8 u32 format version (1)   12 u32 header bytes (64)
//     16 i32 world size          20 i32 rank                24 i64 step
//     32 u64 config hash         40 u32 number of sections  44..63 zero
//   each section:
//     u32 "SECT" (0x54434553), u16 name length, u8 dtype (0 raw, 1 f32, 2 u8), u8 ndim,
//     name bytes, i64 dims[ndim], u64 byte length, zero padding up to a multiple of 64, data.
//
// Decision: the reader never trusts a length it has not checked against the bytes left in the file,
// so a corrupt or hostile header cannot make it allocate more than the file holds (docs/reliability.md F2),
// and it is written against a ByteSource so the same parser runs on a file or a fuzzer's buffer.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint.h"

namespace flotilla::ckpt {

class DurableWriter;

inline constexpr char kRankMagic[9] = "FLTCKPT1";
inline constexpr uint32_t kRankFormatVersion = 1;
inline constexpr uint64_t kRankHeaderBytes = 64;
inline constexpr uint64_t kSectionAlign = 64;
inline constexpr uint32_t kSectionMarker = 0x54434553u;  // "SECT"
inline constexpr uint32_t kMaxSections = 4096;
inline constexpr uint32_t kMaxDims = 8;

enum class SectionDtype : uint8_t { kRaw = 0, kF32 = 1, kU8 = 2 };
const char* dtype_name(SectionDtype dtype);

struct RankHeader {
  uint32_t version = kRankFormatVersion;
  int32_t world_size = 1;
  int32_t rank = 0;
  int64_t step = 0;
  uint64_t config_hash = 0;
  uint32_t num_sections = 0;
};

struct SectionInfo {
  std::string name;
  SectionDtype dtype = SectionDtype::kRaw;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
  uint64_t offset = 0;  // of the data in the file
};

// f32 when prod(shape) * 4 == bytes, u8 when prod(shape) == bytes, raw otherwise.
SectionDtype infer_dtype(const std::vector<int64_t>& shape, size_t bytes);

// Exact size of the rank file that write_rank_file() produces for `tensors`.
uint64_t rank_file_size(const std::vector<TensorBlob>& tensors);

// Writes header + sections through `w` (which checks every write). Returns the section table.
std::vector<SectionInfo> write_rank_file(DurableWriter& w, const RankHeader& header,
                                         const std::vector<TensorBlob>& tensors);

// Sequential bytes with a running CRC-32C of everything consumed.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Reads exactly n bytes into dst (nullptr: skip them, still checksummed); false at end of data.
  bool read(void* dst, size_t n);
  // Consumes and checksums whatever is left (to report a checksum when parsing stopped early).
  void drain();
  uint32_t crc() const { return crc_; }
  uint64_t consumed() const { return consumed_; }

 protected:
  // Up to n bytes into dst; returns the count (0 at the end). Throws Error(kCheckpoint) on I/O errors.
  virtual size_t read_some(void* dst, size_t n) = 0;

 private:
  uint32_t crc_ = 0;
  uint64_t consumed_ = 0;
};

class FileSource : public ByteSource {
 public:
  explicit FileSource(const std::string& path);  // throws Error(kCheckpoint) when it cannot open
  ~FileSource() override;
  FileSource(const FileSource&) = delete;
  FileSource& operator=(const FileSource&) = delete;
  uint64_t size() const { return size_; }

 protected:
  size_t read_some(void* dst, size_t n) override;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

class MemorySource : public ByteSource {
 public:
  MemorySource(const void* data, size_t size) : data_(static_cast<const uint8_t*>(data)), size_(size) {}

 protected:
  size_t read_some(void* dst, size_t n) override;

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

struct RankFileContents {
  RankHeader header;
  std::vector<SectionInfo> sections;
  std::vector<LoadedTensor> tensors;  // the kept sections, in file order
};

// Parses a rank file of exactly `file_size` bytes from `src`. Sections whose name passes `keep` are
// copied out (keep empty: none); the others are only checksummed. Throws Error(kCheckpoint) with a
// message starting "<file_label>: " on any malformed field, before allocating for it.
RankFileContents read_rank_file(ByteSource& src, uint64_t file_size, const std::string& file_label,
                                const std::function<bool(const std::string&)>& keep);

}  // namespace flotilla::ckpt
