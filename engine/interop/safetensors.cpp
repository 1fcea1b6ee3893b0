// safetensors reader and writer (format and strictness rules in safetensors.h).
#include "engine/interop/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "engine/checkpoint/durable_io.h"
#include "engine/core/error.h"

namespace flotilla::interop {
namespace {

using nlohmann::json;

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;  // the reference implementation's limit
constexpr size_t kConvertChunkBytes = size_t{8} << 20;     // source bytes converted per step

[[noreturn]] void bad(const std::string& label, const std::string& what) { throw_data(label + ": " + what); }

bool numel_checked(const std::vector<int64_t>& shape, uint64_t* out) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return false;
    if (d != 0 && n > (uint64_t{1} << 62) / static_cast<uint64_t>(d)) return false;
    n *= static_cast<uint64_t>(d);
  }
  *out = n;
  return true;
}

void pread_exact(int fd, void* dst, size_t n, uint64_t offset, const std::string& label) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) bad(label, "read failed: " + errno_string(errno));
    if (got == 0) bad(label, "file ended early (truncated?)");
    p += got;
    n -= static_cast<size_t>(got);
    offset += static_cast<uint64_t>(got);
  }
}

// n elements of `dtype` at src (any alignment) to fp32 at dst.
void convert_to_f32(const std::string& dtype, const uint8_t* src, size_t n, float* dst) {
  if (dtype == "F32") {
    std::memcpy(dst, src, n * 4);
  } else if (dtype == "BF16") {
    for (size_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, src + 2 * i, 2);
      dst[i] = bf16_to_f32(v);
    }
  } else if (dtype == "F16") {
    for (size_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, src + 2 * i, 2);
      dst[i] = f16_to_f32(v);
    }
  } else {  // F64
    for (size_t i = 0; i < n; ++i) {
      double v;
      std::memcpy(&v, src + 8 * i, 8);
      dst[i] = static_cast<float>(v);
    }
  }
}

// madvise(advice) on the pages overlapping [p, p + n), clamped to the map. With MADV_DONTNEED the
// process drops its mapping of them: they stay in the page cache and fault back in from the file if
// touched again (the map is read-only and private, so nothing is lost).
void advise_pages(const uint8_t* map, uint64_t map_bytes, const uint8_t* p, uint64_t n, int advice) {
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t lo = reinterpret_cast<uintptr_t>(p) & ~(page - 1);
  const uintptr_t end =
      std::min<uintptr_t>(reinterpret_cast<uintptr_t>(p) + n, reinterpret_cast<uintptr_t>(map) + map_bytes);
  if (end > lo) ::madvise(reinterpret_cast<void*>(lo), end - lo, advice);
}

}  // namespace

uint16_t f32_to_bf16(float f) {
  if (std::isnan(f)) return 0x7FC0;
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t bias = 0x7FFFu + ((bits >> 16) & 1u);  // ties go to the even upper half
  return static_cast<uint16_t>((bits + bias) >> 16);
}

size_t safetensors_dtype_size(const std::string& dtype) {
  if (dtype == "F64" || dtype == "I64" || dtype == "U64") return 8;
  if (dtype == "F32" || dtype == "I32" || dtype == "U32") return 4;
  if (dtype == "F16" || dtype == "BF16" || dtype == "I16" || dtype == "U16") return 2;
  if (dtype == "I8" || dtype == "U8" || dtype == "BOOL" || dtype == "F8_E4M3" || dtype == "F8_E5M2") return 1;
  return 0;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0) {
    const float mag = std::ldexp(static_cast<float>(mant), -24);  // zero or subnormal
    return sign ? -mag : mag;
  } else if (exp == 31) {
    bits = sign | 0x7F800000u | (mant << 13);  // inf / nan
  } else {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

float bf16_to_f32(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

void parse_safetensors_header(const std::string& text, uint64_t data_bytes, const std::string& label,
                              std::vector<SafetensorsEntry>* entries,
                              std::map<std::string, std::string>* metadata) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) bad(label, "header is not a JSON object (not a safetensors file?)");
  entries->clear();
  metadata->clear();
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) bad(label, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m)
        if (m.value().is_string()) (*metadata)[m.key()] = m.value().get<std::string>();
      continue;
    }
    if (!v.is_object()) bad(label, "tensor " + name + ": entry is not an object");
    SafetensorsEntry e;
    e.name = name;
    auto dt = v.find("dtype"), sh = v.find("shape"), off = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string()) bad(label, "tensor " + name + ": dtype missing");
    e.dtype = dt->get<std::string>();
    const size_t esize = safetensors_dtype_size(e.dtype);
    if (esize == 0) bad(label, "tensor " + name + ": unknown dtype " + e.dtype);
    if (sh == v.end() || !sh->is_array() || sh->size() > 16) bad(label, "tensor " + name + ": shape missing");
    for (const json& d : *sh) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) bad(label, "tensor " + name + ": bad shape");
      e.shape.push_back(d.get<int64_t>());
    }
    if (off == v.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned())
      bad(label, "tensor " + name + ": data_offsets missing");
    e.begin = (*off)[0].get<uint64_t>();
    e.end = (*off)[1].get<uint64_t>();
    uint64_t n = 0;
    if (!numel_checked(e.shape, &n) || e.begin > e.end || e.end > data_bytes || n * esize != e.end - e.begin)
      bad(label, "tensor " + name + ": data_offsets [" + std::to_string(e.begin) + ", " +
                     std::to_string(e.end) + "] do not fit shape " + shape_string(e.shape) + " " + e.dtype +
                     " in " + std::to_string(data_bytes) + " data bytes");
    entries->push_back(std::move(e));
  }
  std::sort(entries->begin(), entries->end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return a.begin < b.begin || (a.begin == b.begin && a.end < b.end);
  });
  uint64_t expect = 0;
  for (const SafetensorsEntry& e : *entries) {
    if (e.begin != expect)
      bad(label, "tensor " + e.name + " starts at " + std::to_string(e.begin) + ", expected " +
                     std::to_string(expect) + " (overlapping or gapped data_offsets)");
    expect = e.end;
  }
  if (expect != data_bytes)
    bad(label,
        "tensors cover " + std::to_string(expect) + " of " + std::to_string(data_bytes) + " data bytes");
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw_data(path + ": cannot open: " + errno_string(errno));
  try {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) bad(path, errno_string(errno));
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (size < 8) bad(path, "only " + std::to_string(size) + " bytes (not a safetensors file)");
    uint64_t n = 0;
    pread_exact(fd_, &n, 8, 0, path);
    if (n > kMaxHeaderBytes || n > size - 8)
      bad(path, "header length " + std::to_string(n) + " exceeds the file (" + std::to_string(size) +
                    " bytes) or the 100 MB limit (not a safetensors file?)");
    std::string header(static_cast<size_t>(n), '\0');
    pread_exact(fd_, header.data(), header.size(), 8, path);
    data_start_ = 8 + n;
    parse_safetensors_header(header, size - data_start_, path, &entries_, &metadata_);
    void* m = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE, fd_, 0);
    if (m != MAP_FAILED) {  // else the pread fallback serves every read
      map_ = static_cast<const uint8_t*>(m);
      map_bytes_ = size;
    }
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(const_cast<uint8_t*>(map_), static_cast<size_t>(map_bytes_));
  if (fd_ >= 0) ::close(fd_);
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  for (const SafetensorsEntry& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

std::vector<uint8_t> SafetensorsFile::read_raw(const SafetensorsEntry& e) const {
  std::vector<uint8_t> out(static_cast<size_t>(e.end - e.begin));  // validated against the file size
  pread_exact(fd_, out.data(), out.size(), data_start_ + e.begin, path_ + " tensor " + e.name);
  return out;
}

std::vector<float> SafetensorsFile::read_f32(const SafetensorsEntry& e) const {
  const size_t esize = safetensors_dtype_size(e.dtype);
  std::vector<float> out(static_cast<size_t>((e.end - e.begin) / esize));
  read_f32_into(e, out.data());
  return out;
}

void SafetensorsFile::read_f32_into(const SafetensorsEntry& e, float* dst) const {
  if (e.dtype != "F32" && e.dtype != "F16" && e.dtype != "BF16" && e.dtype != "F64")
    throw_data(path_ + ": tensor " + e.name + " has dtype " + e.dtype +
               "; only F32, F16, BF16 and F64 weights can be imported");
  const size_t esize = safetensors_dtype_size(e.dtype);
  const uint64_t total = e.end - e.begin;  // validated against the file size by the header parser
  const size_t chunk_elems = kConvertChunkBytes / esize;
  std::vector<uint8_t> bounce;
  for (uint64_t done = 0; done < total;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk_elems, (total - done) / esize));
    const uint64_t at = data_start_ + e.begin + done;
    if (map_ != nullptr) {
      const uint8_t* src = map_ + at;
      const uint64_t rest = total - done - n * esize;
      if (rest > 0)  // have the kernel read the next span while this one converts
        advise_pages(map_, map_bytes_, src + n * esize, std::min<uint64_t>(rest, kConvertChunkBytes),
                     MADV_WILLNEED);
      convert_to_f32(e.dtype, src, n, dst + done / esize);
      advise_pages(map_, map_bytes_, src, n * esize, MADV_DONTNEED);
    } else {
      bounce.resize(n * esize);
      pread_exact(fd_, bounce.data(), bounce.size(), at, path_ + " tensor " + e.name);
      convert_to_f32(e.dtype, bounce.data(), n, dst + done / esize);
    }
    done += n * esize;
  }
}

std::string safetensors_header_block(const std::vector<SafetensorsOutTensor>& tensors,
                                     const std::map<std::string, std::string>& metadata,
                                     uint64_t* data_bytes) {
  json header = json::object();
  uint64_t offset = 0;
  for (const SafetensorsOutTensor& t : tensors) {
    uint64_t n = 0;
    const size_t esize = safetensors_dtype_size(t.dtype);
    if (esize == 0 || !numel_checked(t.shape, &n) || header.contains(t.name) || t.name == "__metadata__")
      throw Error(ExitCode::kInternal, "write_safetensors: bad tensor " + t.name);
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + n * esize}}};
    offset += n * esize;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts at a multiple of 8
  const uint64_t len = text.size();
  *data_bytes = offset;
  return std::string(reinterpret_cast<const char*>(&len), 8) + text;
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsOutTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  uint64_t data_bytes = 0;
  const std::string head = safetensors_header_block(tensors, metadata, &data_bytes);
  ckpt::replace_file_durably(path, head.size() + data_bytes, [&](ckpt::DurableWriter& w) {
    w.write(head.data(), head.size());
    std::vector<uint8_t> buf;
    for (const SafetensorsOutTensor& t : tensors) {
      uint64_t n = 0;
      numel_checked(t.shape, &n);  // checked by safetensors_header_block
      const size_t bytes = static_cast<size_t>(n * safetensors_dtype_size(t.dtype));
      if (bytes == 0) continue;
      if (t.data != nullptr) {
        w.write(t.data, bytes);
      } else {
        buf.resize(bytes);
        t.fill(buf.data());
        w.write(buf.data(), buf.size());
      }
    }
  });
}

}  // namespace flotilla::interop
