// safetensors reader and writer (format and strictness rules in safetensors.h).
#include "engine/interop/safetensors.h"

#include <fcntl.h>
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

}  // namespace

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
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
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
  const size_t n = static_cast<size_t>((e.end - e.begin) / esize);
  std::vector<float> out(n);
  if (e.dtype == "F32") {
    pread_exact(fd_, out.data(), n * 4, data_start_ + e.begin, path_ + " tensor " + e.name);
    return out;
  }
  const std::vector<uint8_t> raw = read_raw(e);
  if (e.dtype == "F16" || e.dtype == "BF16") {
    const bool half = e.dtype == "F16";
    for (size_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, raw.data() + 2 * i, 2);
      out[i] = half ? f16_to_f32(v) : bf16_to_f32(v);
    }
  } else if (e.dtype == "F64") {
    for (size_t i = 0; i < n; ++i) {
      double v;
      std::memcpy(&v, raw.data() + 8 * i, 8);
      out[i] = static_cast<float>(v);
    }
  } else {
    throw_data(path_ + ": tensor " + e.name + " has dtype " + e.dtype +
               "; only F32, F16, BF16 and F64 weights can be imported");
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsOutTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  std::vector<uint64_t> sizes;
  uint64_t offset = 0;
  for (const SafetensorsOutTensor& t : tensors) {
    uint64_t n = 0;
    const size_t esize = safetensors_dtype_size(t.dtype);
    if (esize == 0 || !numel_checked(t.shape, &n) || header.contains(t.name) || t.name == "__metadata__")
      throw Error(ExitCode::kInternal, "write_safetensors: bad tensor " + t.name);
    sizes.push_back(n * esize);
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + n * esize}}};
    offset += n * esize;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts at a multiple of 8
  const uint64_t total = 8 + text.size() + offset;

  ckpt::replace_file_durably(path, total, [&](ckpt::DurableWriter& w) {
    const uint64_t n = text.size();
    w.write(&n, 8);
    w.write(text.data(), text.size());
    std::vector<uint8_t> buf;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (sizes[i] == 0) continue;
      if (tensors[i].data != nullptr) {
        w.write(tensors[i].data, sizes[i]);
      } else {
        buf.resize(sizes[i]);
        tensors[i].fill(buf.data());
        w.write(buf.data(), buf.size());
      }
    }
  });
}

}  // namespace flotilla::interop
