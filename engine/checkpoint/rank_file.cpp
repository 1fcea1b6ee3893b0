// rank-R.bin writer and bounds-checked reader (format in rank_file.h).
//
// Every length read from the file is compared with the bytes that remain before anything is
// allocated or skipped; element counts are multiplied with overflow checks.
#include "engine/checkpoint/rank_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>

#include "engine/checkpoint/durable_io.h"
#include "engine/core/checksum.h"
#include "engine/core/error.h"

namespace flotilla::ckpt {
namespace {

static_assert(std::endian::native == std::endian::little, "checkpoint files are little-endian");

template <typename T>
void put(std::string& out, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  out.append(buf, sizeof(T));
}

uint64_t padding_for(uint64_t offset) { return (kSectionAlign - offset % kSectionAlign) % kSectionAlign; }

uint64_t descriptor_size(const TensorBlob& t) {
  return 4 + 2 + 1 + 1 + t.name.size() + 8 * t.shape.size() + 8;
}

// Product of dims, or false on a negative dim or overflow past 2^62.
bool element_count(const std::vector<int64_t>& shape, uint64_t* out) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return false;
    if (d != 0 && n > (uint64_t{1} << 62) / static_cast<uint64_t>(d)) return false;
    n *= static_cast<uint64_t>(d);
  }
  *out = n;
  return true;
}

template <typename T>
T get(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

const char* dtype_name(SectionDtype dtype) {
  switch (dtype) {
    case SectionDtype::kF32:
      return "f32";
    case SectionDtype::kU8:
      return "u8";
    case SectionDtype::kRaw:
      return "raw";
  }
  return "raw";
}

SectionDtype infer_dtype(const std::vector<int64_t>& shape, size_t bytes) {
  uint64_t n = 0;
  if (!element_count(shape, &n)) return SectionDtype::kRaw;
  if (n * 4 == bytes) return SectionDtype::kF32;
  if (n == bytes) return SectionDtype::kU8;
  return SectionDtype::kRaw;
}

uint64_t rank_file_size(const std::vector<TensorBlob>& tensors) {
  uint64_t off = kRankHeaderBytes;
  for (const TensorBlob& t : tensors) {
    off += descriptor_size(t);
    off += padding_for(off);
    off += t.bytes;
  }
  return off;
}

std::vector<SectionInfo> write_rank_file(DurableWriter& w, const RankHeader& h,
                                         const std::vector<TensorBlob>& tensors) {
  std::string head;
  head.append(kRankMagic, 8);
  put<uint32_t>(head, h.version);
  put<uint32_t>(head, static_cast<uint32_t>(kRankHeaderBytes));
  put<int32_t>(head, h.world_size);
  put<int32_t>(head, h.rank);
  put<int64_t>(head, h.step);
  put<uint64_t>(head, h.config_hash);
  put<uint32_t>(head, static_cast<uint32_t>(tensors.size()));
  head.resize(kRankHeaderBytes, '\0');

  std::vector<SectionInfo> infos;
  uint64_t off = kRankHeaderBytes;
  std::string pending = std::move(head);  // small descriptors are coalesced with the next write
  for (const TensorBlob& t : tensors) {
    if (t.name.empty() || t.name.size() > 255 || t.shape.size() > kMaxDims)
      throw Error(ExitCode::kInternal,
                  "checkpoint section '" + t.name + "': name must be 1-255 bytes and rank <= 8");
    SectionInfo info{t.name, infer_dtype(t.shape, t.bytes), t.shape, t.bytes, 0};
    put<uint32_t>(pending, kSectionMarker);
    put<uint16_t>(pending, static_cast<uint16_t>(t.name.size()));
    put<uint8_t>(pending, static_cast<uint8_t>(info.dtype));
    put<uint8_t>(pending, static_cast<uint8_t>(t.shape.size()));
    pending.append(t.name);
    for (int64_t d : t.shape) put<int64_t>(pending, d);
    put<uint64_t>(pending, static_cast<uint64_t>(t.bytes));
    off += descriptor_size(t);
    const uint64_t pad = padding_for(off);
    pending.append(pad, '\0');
    off += pad;
    info.offset = off;
    if (t.bytes > 4096) {
      w.write(pending.data(), pending.size());
      pending.clear();
      w.write(t.data, t.bytes);
    } else if (t.bytes > 0) {
      pending.append(static_cast<const char*>(t.data), t.bytes);
    }
    off += t.bytes;
    infos.push_back(std::move(info));
  }
  if (!pending.empty()) w.write(pending.data(), pending.size());
  return infos;
}

bool ByteSource::read(void* dst, size_t n) {
  uint8_t scratch[1 << 16];
  uint8_t* out = static_cast<uint8_t*>(dst);
  while (n > 0) {
    const size_t want = out != nullptr ? n : (n < sizeof scratch ? n : sizeof scratch);
    uint8_t* into = out != nullptr ? out : scratch;
    const size_t got = read_some(into, want);
    if (got == 0) return false;
    crc_ = crc32c(into, got, crc_);
    consumed_ += got;
    n -= got;
    if (out != nullptr) out += got;
  }
  return true;
}

void ByteSource::drain() {
  while (read(nullptr, size_t{1} << 20)) {
  }
}

FileSource::FileSource(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw_checkpoint(path + ": " + errno_string(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) throw_checkpoint(path + ": " + errno_string(errno));
  size_ = static_cast<uint64_t>(st.st_size);
}

FileSource::~FileSource() {
  if (fd_ >= 0) ::close(fd_);
}

size_t FileSource::read_some(void* dst, size_t n) {
  for (;;) {
    const ssize_t got = ::read(fd_, dst, n);
    if (got >= 0) return static_cast<size_t>(got);
    if (errno != EINTR) throw_checkpoint(path_ + ": read failed: " + errno_string(errno));
  }
}

size_t MemorySource::read_some(void* dst, size_t n) {
  const size_t left = size_ - pos_;
  const size_t take = n < left ? n : left;
  std::memcpy(dst, data_ + pos_, take);
  pos_ += take;
  return take;
}

RankFileContents read_rank_file(ByteSource& src, uint64_t file_size, const std::string& label,
                                const std::function<bool(const std::string&)>& keep) {
  auto fail = [&](const std::string& what) -> void { throw_checkpoint(label + ": " + what); };
  auto need = [&](void* dst, uint64_t n, const char* what) {
    if (n > file_size - src.consumed())
      fail(std::string(what) + " needs " + std::to_string(n) + " bytes but only " +
           std::to_string(file_size - src.consumed()) + " remain (truncated or corrupt)");
    if (!src.read(dst, static_cast<size_t>(n))) fail(std::string("file ended inside ") + what);
  };

  RankFileContents out;
  uint8_t h[kRankHeaderBytes];
  need(h, kRankHeaderBytes, "the header");
  if (std::memcmp(h, kRankMagic, 8) != 0) fail("bad magic (not a Flotilla rank file)");
  RankHeader& hd = out.header;
  hd.version = get<uint32_t>(h + 8);
  if (hd.version != kRankFormatVersion)
    fail("format version " + std::to_string(hd.version) + ", this engine reads " +
         std::to_string(kRankFormatVersion));
  if (get<uint32_t>(h + 12) != kRankHeaderBytes) fail("header size field is not 64");
  hd.world_size = get<int32_t>(h + 16);
  hd.rank = get<int32_t>(h + 20);
  hd.step = get<int64_t>(h + 24);
  hd.config_hash = get<uint64_t>(h + 32);
  hd.num_sections = get<uint32_t>(h + 40);
  if (hd.world_size < 1 || hd.world_size > (1 << 20))
    fail("world size " + std::to_string(hd.world_size) + " is invalid");
  if (hd.rank < 0 || hd.rank >= hd.world_size)
    fail("rank " + std::to_string(hd.rank) + " is outside world size " + std::to_string(hd.world_size));
  if (hd.step < 0) fail("negative step");
  if (hd.num_sections > kMaxSections)
    fail(std::to_string(hd.num_sections) + " sections is more than the limit");

  for (uint32_t s = 0; s < hd.num_sections; ++s) {
    uint8_t d[8];
    need(d, 8, "a section descriptor");
    if (get<uint32_t>(d) != kSectionMarker) fail("section " + std::to_string(s) + ": bad section marker");
    const uint16_t name_len = get<uint16_t>(d + 4);
    const uint8_t dtype = d[6], ndim = d[7];
    if (name_len == 0) fail("section " + std::to_string(s) + ": empty name");
    if (dtype > 2) fail("section " + std::to_string(s) + ": unknown dtype " + std::to_string(dtype));
    if (ndim > kMaxDims) fail("section " + std::to_string(s) + ": " + std::to_string(ndim) + " dims");
    SectionInfo info;
    info.name.resize(name_len);
    need(info.name.data(), name_len, "a section name");
    if (info.name.find('\0') != std::string::npos) fail("section " + std::to_string(s) + ": NUL in name");
    info.dtype = static_cast<SectionDtype>(dtype);
    info.shape.resize(ndim);
    if (ndim > 0) need(info.shape.data(), 8u * ndim, "section dims");
    uint8_t len[8];
    need(len, 8, "a section length");
    info.bytes = get<uint64_t>(len);
    const std::string what = "section '" + info.name + "'";
    const uint64_t pad = padding_for(src.consumed());
    if (pad > 0) need(nullptr, pad, "section padding");
    info.offset = src.consumed();
    if (info.bytes > file_size - src.consumed())
      fail(what + " claims " + std::to_string(info.bytes) + " bytes but only " +
           std::to_string(file_size - src.consumed()) + " remain in the file");
    uint64_t n = 0;
    if (!element_count(info.shape, &n)) fail(what + ": invalid shape");
    if ((info.dtype == SectionDtype::kF32 && n * 4 != info.bytes) ||
        (info.dtype == SectionDtype::kU8 && n != info.bytes))
      fail(what + ": shape and byte length disagree");
    if (keep && keep(info.name)) {
      LoadedTensor t{info.name, info.shape, {}};
      t.data.resize(static_cast<size_t>(info.bytes));  // bounded by the file size above
      need(t.data.data(), info.bytes, what.c_str());
      out.tensors.push_back(std::move(t));
    } else {
      need(nullptr, info.bytes, what.c_str());
    }
    out.sections.push_back(std::move(info));
  }
  if (src.consumed() != file_size)
    fail(std::to_string(file_size - src.consumed()) + " unexpected bytes after the last section");
  return out;
}

}  // namespace flotilla::ckpt
