// Token shards (llm.c's and the labeled variant): header validation, memory mapping, glob
// expansion and durable writing.
//
// One non-obvious decision: every validation error names the file and gives the arithmetic
// ("size 1,000,002 != 1,024 + 2 x 499,489 tokens = 999,002 bytes"), because the user's fix depends
// on which side is wrong (a truncated copy vs. a file that is not a shard at all), and only the
// numbers tell those apart.
#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include "engine/core/error.h"
#include "engine/data/loader.h"
#include "engine/data/shard_map.h"

namespace flotilla {

std::string group_digits(int64_t value) {
  const bool negative = value < 0;
  const uint64_t magnitude = negative ? 0 - static_cast<uint64_t>(value) : static_cast<uint64_t>(value);
  const std::string digits = std::to_string(magnitude);
  std::string out;
  const int n = static_cast<int>(digits.size());
  for (int i = 0; i < n; ++i) {
    out += digits[static_cast<size_t>(i)];
    if ((n - 1 - i) % 3 == 0 && i != n - 1) out += ',';
  }
  return negative ? "-" + out : out;
}

namespace {

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

bool read_exact(int fd, void* buf, size_t n, off_t offset) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, offset);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
    offset += got;
  }
  return true;
}

// Validates the header of an open shard against its size; fills info.
void check_header(const std::string& path, int fd, int64_t file_size, ShardInfo& info) {
  const std::string where = "shard " + path + ": ";
  if (file_size < kShardHeaderBytes)
    throw_data(where + "size " + group_digits(file_size) + " bytes is smaller than the 1,024-byte header: " +
               "truncated or not a token shard; re-run data prepare");
  int32_t header[kShardHeaderInts];
  if (!read_exact(fd, header, sizeof header, 0))
    throw_data(where + "cannot read the header: " + errno_string(errno));
  info.path = path;
  info.magic = header[0];
  info.version = header[1];
  if (info.magic == kShardMagicU16) {
    if (info.version != kShardVersionU16)
      throw_data(where + "unknown version " + std::to_string(info.version) + " for magic " +
                 std::to_string(kShardMagicU16) + " (expected 1, uint16 tokens); re-run data prepare");
    info.token_bytes = 2;
  } else if (info.magic == kShardMagicU32) {
    if (info.version != kShardVersionU32)
      throw_data(where + "unknown version " + std::to_string(info.version) + " for magic " +
                 std::to_string(kShardMagicU32) + " (expected 7, uint32 tokens); re-run data prepare");
    info.token_bytes = 4;
  } else if (info.magic == kShardMagicLabeled) {
    if (info.version != kShardVersionLabeled)
      throw_data(where + "labeled shard version " + std::to_string(info.version) +
                 " is not supported (expected 1); upgrade flotilla-worker or re-run data prepare");
    if (header[3] != 2 && header[3] != 4)
      throw_data(where + "labeled shard token width " + std::to_string(header[3]) +
                 " (header[3]) must be 2 or 4: damaged header; re-run data prepare");
    if (header[4] != 0 && header[4] != 1)
      throw_data(where + "labeled shard packing flag " + std::to_string(header[4]) +
                 " (header[4]) must be 0 or 1: damaged header; re-run data prepare");
    info.labeled = true;
    info.token_bytes = header[3];
    info.pack = header[4] == 1;
    info.pad_id = static_cast<uint32_t>(header[5]);
    info.documents = header[6];
    info.targets = header[7];
    if (info.documents < 0 || info.targets < 0 || info.documents > header[2] || info.targets > header[2])
      throw_data(where + "labeled shard counts (" + group_digits(info.documents) + " documents, " +
                 group_digits(info.targets) + " targets) do not fit its " + group_digits(header[2]) +
                 " tokens: damaged header; re-run data prepare");
  } else {
    throw_data(where + "bad magic " + std::to_string(info.magic) +
               " (expected 20240520 for uint16 tokens, 20240801 for uint32 tokens or 20251201 for a "
               "labeled shard): not a token shard; re-run data prepare");
  }
  const int64_t count = header[2];
  if (count < 0)
    throw_data(where + "header token count " + group_digits(count) +
               " is negative: damaged header; re-run data prepare");
  info.num_tokens = count;
  const int per_token = info.token_bytes + (info.labeled ? 1 : 0);  // a labeled shard adds a flag byte
  const int64_t expected = kShardHeaderBytes + per_token * count;
  if (file_size != expected)
    throw_data(
        where + "size " + group_digits(file_size) + " != 1,024 + " + std::to_string(per_token) + " x " +
        group_digits(count) + " tokens = " + group_digits(expected) + " bytes: " +
        (file_size < expected ? "truncated or not a token shard" : "trailing data or a wrong token count") +
        "; re-run data prepare");
}

}  // namespace

void check_prepare_finished(const std::string& shard_path) {
  const std::filesystem::path parent = std::filesystem::path(shard_path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  const std::string marker = dir + "/" + kPrepareIncompleteFile;
  Fd f;
  f.fd = ::open(marker.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) return;  // a finished prepare, or shards made some other way
  // "pid P\n": still running when that process is a data prepare.
  char text[64] = {};
  const ssize_t n = ::read(f.fd, text, sizeof text - 1);
  long pid = 0;
  if (n > 0) std::sscanf(text, "pid %ld", &pid);
  bool running = false;
  if (pid > 0) {
    Fd c;
    c.fd = ::open(("/proc/" + std::to_string(pid) + "/cmdline").c_str(), O_RDONLY | O_CLOEXEC);
    char cmd[4096] = {};
    const ssize_t got = c.fd >= 0 ? ::read(c.fd, cmd, sizeof cmd - 1) : -1;
    if (got > 0) {
      std::string args(cmd, static_cast<size_t>(got));
      std::replace(args.begin(), args.end(), '\0', ' ');
      running = args.find(" data prepare ") != std::string::npos;
    }
  }
  if (running)
    throw_data("shard " + shard_path + ": data prepare into " + dir + " is still running (pid " +
               std::to_string(pid) +
               "): its shards are only part of the data set until it finishes; wait for it");
  throw_data("shard " + shard_path + ": data prepare into " + dir + " was interrupted (" + marker +
             " is still there): its shards are only part of the data set. Run it again with --force");
}

void throw_token_out_of_range(const ShardInfo& info, int64_t offset, uint32_t value, int vocab_size) {
  throw_data("shard " + info.path + ": token " + group_digits(value) + " at token offset " +
             group_digits(offset) + " (file byte " +
             group_digits(kShardHeaderBytes + offset * info.token_bytes) + ") >= vocab size " +
             group_digits(vocab_size) +
             ": the shard was made with a different tokenizer; re-run data prepare or set model.vocab_size");
}

ShardInfo inspect_shard(const std::string& path, int vocab_size, bool check_tokens) {
  check_prepare_finished(path);
  if (check_tokens && vocab_size > 0) {
    const ShardFile shard(path);
    constexpr int64_t kChunk = 1 << 20;
    std::vector<int32_t> ids;
    for (int64_t at = 0; at < shard.size(); at += kChunk) {
      const int64_t n = std::min(kChunk, shard.size() - at);
      ids.resize(static_cast<size_t>(n));
      shard.read(at, n, ids.data());
      for (int64_t i = 0; i < n; ++i)
        if (static_cast<uint32_t>(ids[static_cast<size_t>(i)]) >= static_cast<uint32_t>(vocab_size))
          throw_token_out_of_range(shard.info(), at + i, static_cast<uint32_t>(ids[static_cast<size_t>(i)]),
                                   vocab_size);
    }
    return shard.info();
  }
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) throw_data("shard " + path + ": cannot open: " + errno_string(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) throw_data("shard " + path + ": cannot stat: " + errno_string(errno));
  if (!S_ISREG(st.st_mode)) throw_data("shard " + path + ": not a regular file");
  ShardInfo info;
  check_header(path, f.fd, static_cast<int64_t>(st.st_size), info);
  return info;
}

std::vector<std::string> expand_shards(const std::string& pattern) {
  if (pattern.empty()) throw_data("no shard path or pattern given");
  if (pattern.find_first_of("*?[") == std::string::npos) {
    std::error_code ec;
    if (!std::filesystem::exists(pattern, ec)) throw_data("shard " + pattern + ": no such file");
    return {pattern};
  }
  glob_t g{};
  // glob() reports the directory it could not open through this callback (a C function pointer,
  // hence the thread_local); ENOENT there means the folder does not exist, not that it is unreadable.
  static thread_local std::pair<std::string, int> failed;
  failed = {"", 0};
  const auto on_error = [](const char* path, int err) {
    failed = {path, err};
    return 1;
  };
  const int rc = ::glob(pattern.c_str(), GLOB_ERR, on_error, &g);
  std::vector<std::string> out;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  if (rc == GLOB_NOMATCH || (rc == 0 && out.empty()))
    throw_data("no files match the shard pattern '" + pattern +
               "'; check the path (data prepare writes train_NNN.bin)");
  if (rc != 0 && (failed.second == ENOENT || failed.second == ENOTDIR))
    throw_data("no files match the shard pattern '" + pattern + "': the folder " + failed.first +
               " does not exist; check the path (data prepare writes train_NNN.bin)");
  if (rc != 0)
    throw_data("cannot expand the shard pattern '" + pattern + "': cannot read the folder " +
               (failed.first.empty() ? std::string("(unknown)") : failed.first) + ": " +
               errno_string(failed.second));
  std::sort(out.begin(), out.end());  // byte order, independent of the locale's collation
  return out;
}

namespace {

// Writes header, tokens at the given width and the optional flag bytes to a temporary file, fsyncs
// it, renames it over `path` and fsyncs the directory.
void write_shard_file(const std::string& path, const int32_t (&header)[kShardHeaderInts],
                      const std::vector<uint32_t>& tokens, bool wide, const std::vector<uint8_t>* flags) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  Fd f;
  f.fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (f.fd < 0) throw_io("cannot create " + tmp + ": " + errno_string(errno));
  auto write_all = [&](const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t put = ::write(f.fd, p, n);
      if (put < 0 && errno == EINTR) continue;
      if (put < 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        throw_io("cannot write " + tmp + ": " + errno_string(err));
      }
      p += put;
      n -= static_cast<size_t>(put);
    }
  };
  write_all(header, sizeof header);
  if (wide) {
    write_all(tokens.data(), tokens.size() * sizeof(uint32_t));
  } else {
    std::vector<uint16_t> chunk;
    constexpr size_t kChunk = 1 << 16;
    for (size_t i = 0; i < tokens.size(); i += kChunk) {
      const size_t n = std::min(kChunk, tokens.size() - i);
      chunk.resize(n);
      for (size_t j = 0; j < n; ++j) chunk[j] = static_cast<uint16_t>(tokens[i + j]);
      write_all(chunk.data(), n * sizeof(uint16_t));
    }
  }
  if (flags) write_all(flags->data(), flags->size());
  if (::fsync(f.fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw_io("cannot fsync " + tmp + ": " + errno_string(err));
  }
  ::close(f.fd);
  f.fd = -1;
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw_io("cannot rename " + tmp + " to " + path + ": " + errno_string(err));
  }
  // Make the rename itself durable.
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  Fd d;
  d.fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (d.fd >= 0) ::fsync(d.fd);
}

bool needs_uint32(const std::vector<uint32_t>& tokens, bool force_uint32) {
  if (force_uint32) return true;
  for (uint32_t t : tokens)
    if (t > 0xFFFFu) return true;
  return false;
}

void check_count(const std::string& path, size_t n) {
  if (n > static_cast<size_t>(INT32_MAX))
    throw_data("shard " + path + ": " + group_digits(static_cast<int64_t>(n)) +
               " tokens do not fit one shard's int32 count; use a smaller --shard-tokens");
}

}  // namespace

void write_shard(const std::string& path, const std::vector<uint32_t>& tokens, bool force_uint32) {
  check_count(path, tokens.size());
  const bool wide = needs_uint32(tokens, force_uint32);
  int32_t header[kShardHeaderInts] = {};
  header[0] = wide ? kShardMagicU32 : kShardMagicU16;
  header[1] = wide ? kShardVersionU32 : kShardVersionU16;
  header[2] = static_cast<int32_t>(tokens.size());
  write_shard_file(path, header, tokens, wide, nullptr);
}

void write_labeled_shard(const std::string& path, const std::vector<uint32_t>& tokens,
                         const std::vector<uint8_t>& flags_in, bool pack, uint32_t pad_id,
                         bool force_uint32) {
  check_count(path, tokens.size());
  if (flags_in.size() != tokens.size())
    throw_data("shard " + path + ": " + group_digits(static_cast<int64_t>(flags_in.size())) + " flags for " +
               group_digits(static_cast<int64_t>(tokens.size())) + " tokens");
  if (!tokens.empty() && !(flags_in[0] & kFlagDocStart))
    throw_data("shard " + path + ": the first token must start a document");
  std::vector<uint8_t> flags(flags_in);
  int64_t documents = 0, targets = 0;
  for (uint8_t& f : flags) {
    f &= kFlagTarget | kFlagDocStart;
    if (f & kFlagDocStart) {
      f = kFlagDocStart;  // a document's first token is never predicted
      ++documents;
    }
    targets += f & kFlagTarget;
  }
  const bool wide = needs_uint32(tokens, force_uint32) || pad_id > 0xFFFFu;
  int32_t header[kShardHeaderInts] = {};
  header[0] = kShardMagicLabeled;
  header[1] = kShardVersionLabeled;
  header[2] = static_cast<int32_t>(tokens.size());
  header[3] = wide ? 4 : 2;
  header[4] = pack ? 1 : 0;
  header[5] = static_cast<int32_t>(pad_id);
  header[6] = static_cast<int32_t>(documents);
  header[7] = static_cast<int32_t>(targets);
  write_shard_file(path, header, tokens, wide, &flags);
}

// ---- ShardFile ----

ShardFile::ShardFile(const std::string& path) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) throw_data("shard " + path + ": cannot open: " + errno_string(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) throw_data("shard " + path + ": cannot stat: " + errno_string(errno));
  if (!S_ISREG(st.st_mode)) throw_data("shard " + path + ": not a regular file");
  check_header(path, f.fd, static_cast<int64_t>(st.st_size), info_);
  fd_ = f.fd;
  f.fd = -1;
}

ShardFile::~ShardFile() { release(); }

void ShardFile::release() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

ShardFile::ShardFile(ShardFile&& other) noexcept : info_(std::move(other.info_)), fd_(other.fd_) {
  other.fd_ = -1;
}

ShardFile& ShardFile::operator=(ShardFile&& other) noexcept {
  if (this != &other) {
    release();
    info_ = std::move(other.info_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

void ShardFile::read_bytes(int64_t offset, size_t bytes, void* out, const char* what) const {
  auto* p = static_cast<char*>(out);
  size_t done = 0;
  while (done < bytes) {
    const ssize_t got =
        ::pread(fd_, p + done, bytes - done, static_cast<off_t>(offset + static_cast<int64_t>(done)));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0)
      throw_data("shard " + info_.path + ": reading " + what + " at byte " +
                 group_digits(offset + static_cast<int64_t>(done)) + " failed: " + errno_string(errno) +
                 "; check the disk, then resume the run");
    if (got == 0) {
      // The file ended before its header's size: it shrank since it was opened and checked.
      struct stat st {};
      const int64_t now = ::fstat(fd_, &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
      const int per_token = info_.token_bytes + (info_.labeled ? 1 : 0);
      throw_data("shard " + info_.path + ": the file is now " +
                 (now >= 0 ? group_digits(now) + " bytes" : std::string("unreadable")) +
                 " but its header promises 1,024 + " + std::to_string(per_token) + " x " +
                 group_digits(info_.num_tokens) +
                 " tokens = " + group_digits(kShardHeaderBytes + per_token * info_.num_tokens) +
                 " bytes: it was truncated while this run was reading it (no batch was read from the "
                 "missing part). Restore the shard (or re-run data prepare), then resume the run from its "
                 "last checkpoint");
    }
    done += static_cast<size_t>(got);
  }
}

void ShardFile::read(int64_t start, int64_t count, int32_t* out) const {
  if (count <= 0) return;
  const size_t bytes = static_cast<size_t>(count) * static_cast<size_t>(info_.token_bytes);
  const int64_t offset = kShardHeaderBytes + start * info_.token_bytes;
  if (info_.token_bytes == 4) {  // int32 and uint32 have the same bytes: read in place
    read_bytes(offset, bytes, out, "tokens");
    return;
  }
  buffer_.resize(bytes);
  read_bytes(offset, bytes, buffer_.data(), "tokens");
  const auto* p = reinterpret_cast<const uint16_t*>(buffer_.data());
  for (int64_t i = 0; i < count; ++i) out[i] = p[i];
}

void ShardFile::read_flags(int64_t start, int64_t count, uint8_t* out) const {
  if (count <= 0) return;
  if (!info_.labeled) {
    std::memset(out, 0, static_cast<size_t>(count));
    return;
  }
  const int64_t flags_at = kShardHeaderBytes + info_.num_tokens * info_.token_bytes;
  read_bytes(flags_at + start, static_cast<size_t>(count), out, "flags");
}

// ---- MappedShard ----

MappedShard::MappedShard(const std::string& path) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) throw_data("shard " + path + ": cannot open: " + errno_string(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) throw_data("shard " + path + ": cannot stat: " + errno_string(errno));
  if (!S_ISREG(st.st_mode)) throw_data("shard " + path + ": not a regular file");
  check_header(path, f.fd, static_cast<int64_t>(st.st_size), info_);
  map_bytes_ = static_cast<size_t>(st.st_size);
  void* p = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, f.fd, 0);
  if (p == MAP_FAILED) throw_data("shard " + path + ": cannot memory-map: " + errno_string(errno));
  map_ = p;
  tokens_ = static_cast<const char*>(p) + kShardHeaderBytes;
  if (info_.labeled)
    flags_ = static_cast<const uint8_t*>(tokens_) + static_cast<size_t>(info_.num_tokens) * info_.token_bytes;
}

MappedShard::~MappedShard() { release(); }

void MappedShard::release() {
  if (map_) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  tokens_ = nullptr;
  flags_ = nullptr;
  map_bytes_ = 0;
}

MappedShard::MappedShard(MappedShard&& other) noexcept
    : info_(std::move(other.info_)),
      map_(other.map_),
      map_bytes_(other.map_bytes_),
      tokens_(other.tokens_),
      flags_(other.flags_) {
  other.map_ = nullptr;
  other.tokens_ = nullptr;
  other.flags_ = nullptr;
  other.map_bytes_ = 0;
}

MappedShard& MappedShard::operator=(MappedShard&& other) noexcept {
  if (this != &other) {
    release();
    info_ = std::move(other.info_);
    map_ = other.map_;
    map_bytes_ = other.map_bytes_;
    tokens_ = other.tokens_;
    flags_ = other.flags_;
    other.map_ = nullptr;
    other.tokens_ = nullptr;
    other.flags_ = nullptr;
    other.map_bytes_ = 0;
  }
  return *this;
}

void MappedShard::read(int64_t start, int64_t count, int32_t* out) const {
  if (info_.token_bytes == 2) {
    const uint16_t* p = static_cast<const uint16_t*>(tokens_) + start;
    for (int64_t i = 0; i < count; ++i) out[i] = p[i];
  } else {
    const uint32_t* p = static_cast<const uint32_t*>(tokens_) + start;
    for (int64_t i = 0; i < count; ++i) out[i] = static_cast<int32_t>(p[i]);
  }
}

int64_t MappedShard::find_out_of_range(int64_t start, int64_t count, int vocab_size) const {
  const uint32_t limit = static_cast<uint32_t>(vocab_size);
  if (info_.token_bytes == 2) {
    const uint16_t* p = static_cast<const uint16_t*>(tokens_);
    for (int64_t i = start; i < start + count; ++i)
      if (p[i] >= limit) return i;
  } else {
    const uint32_t* p = static_cast<const uint32_t*>(tokens_);
    for (int64_t i = start; i < start + count; ++i)
      if (p[i] >= limit) return i;
  }
  return -1;
}

}  // namespace flotilla
