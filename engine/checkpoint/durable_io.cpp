// Checked POSIX file operations for checkpoints and exports (see durable_io.h).
//
// Writes go out in chunks of at most kMaxWriteChunk so a fault hook sees several "write" points in
// a large file, and so a short write on a nearly full disk is reported with the bytes still needed.
#include "engine/checkpoint/durable_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "engine/core/checksum.h"
#include "engine/core/error.h"

namespace flotilla::ckpt {
namespace {

constexpr size_t kMaxWriteChunk = size_t{4} << 20;  // 4 MiB per write(2)

std::string mib(uint64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

}  // namespace

int fault_errno(const CheckpointFaultHook* hook, const std::string& label) {
  if (hook == nullptr || !*hook) return 0;
  int err = EIO;
  if ((*hook)(label, &err)) return 0;
  return err != 0 ? err : EIO;
}

uint64_t free_bytes(const std::string& path) {
  struct statvfs st {};
  if (::statvfs(path.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.f_bavail) * static_cast<uint64_t>(st.f_frsize);
}

void throw_io_failure(int err, const std::string& action, const std::string& file, const std::string& dir,
                      uint64_t needed_bytes) {
  std::string msg = errno_string(err) + " while " + action + " " + file + " in " + dir;
  if (err == ENOSPC || err == EDQUOT) {
    msg += " (" + (needed_bytes > 0 ? "needed " + mib(needed_bytes) + ", " : std::string()) + "free " +
           mib(free_bytes(dir)) + " from statvfs); free space on that disk or write elsewhere";
  } else {
    msg += "; check that the disk is healthy and writable";
  }
  throw Error(ExitCode::kIo, msg);
}

DurableWriter::DurableWriter(std::string dir, std::string name, const CheckpointFaultHook* hook,
                             uint64_t expected_bytes, bool exclusive)
    : dir_(std::move(dir)), name_(std::move(name)), hook_(hook), expected_(expected_bytes) {
  const std::string path = dir_ + "/" + name_;
  const int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (exclusive ? O_EXCL : O_TRUNC);
  fd_ = ::open(path.c_str(), flags, 0644);
  if (fd_ < 0) throw_io_failure(errno, "creating", name_, dir_, expected_);
}

DurableWriter::~DurableWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void DurableWriter::write(const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const size_t chunk = size < kMaxWriteChunk ? size : kMaxWriteChunk;
    if (int err = fault_errno(hook_, "write " + name_); err != 0)
      throw_io_failure(err, "writing", name_, dir_, expected_ > written_ ? expected_ - written_ : chunk);
    ssize_t n = ::write(fd_, p, chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_io_failure(errno, "writing", name_, dir_, expected_ > written_ ? expected_ - written_ : chunk);
    }
    if (n == 0) throw_io_failure(ENOSPC, "writing", name_, dir_, expected_ - written_);
    crc_ = crc32c(p, static_cast<size_t>(n), crc_);
    p += n;
    size -= static_cast<size_t>(n);
    written_ += static_cast<uint64_t>(n);
  }
}

void DurableWriter::finish() {
  if (int err = fault_errno(hook_, "fsync " + name_); err != 0)
    throw_io_failure(err, "fsync of", name_, dir_, written_);
  if (::fsync(fd_) != 0) throw_io_failure(errno, "fsync of", name_, dir_, written_);
  const int fd = fd_;
  fd_ = -1;
  if (int err = fault_errno(hook_, "close " + name_); err != 0) {
    ::close(fd);
    throw_io_failure(err, "closing", name_, dir_, written_);
  }
  // close(2) is not retried on EINTR: on Linux the descriptor is released either way.
  if (::close(fd) != 0 && errno != EINTR) throw_io_failure(errno, "closing", name_, dir_, written_);
}

void fsync_dir(const std::string& dir, const std::string& label, const CheckpointFaultHook* hook) {
  if (int err = fault_errno(hook, label); err != 0)
    throw_io_failure(err, "fsync of", "the directory", dir, 0);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_io_failure(errno, "opening", "the directory", dir, 0);
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    throw_io_failure(err, "fsync of", "the directory", dir, 0);
  }
  ::close(fd);
}

void rename_checked(const std::string& from, const std::string& to, const std::string& label,
                    const CheckpointFaultHook* hook, const std::string& dir, const std::string& what) {
  if (int err = fault_errno(hook, label); err != 0) throw_io_failure(err, "renaming", what, dir, 0);
  if (::rename(from.c_str(), to.c_str()) != 0) throw_io_failure(errno, "renaming", what, dir, 0);
}

void write_file_atomic(const std::string& dir, const std::string& name, const std::string& content,
                       const CheckpointFaultHook* hook, const std::string& rename_label,
                       const std::string& fsync_label) {
  const std::string tmp_name = name + ".tmp";
  {
    DurableWriter w(dir, tmp_name, hook, content.size(), /*exclusive=*/false);
    w.write(content.data(), content.size());
    w.finish();
  }
  rename_checked(dir + "/" + tmp_name, dir + "/" + name, rename_label, hook, dir, tmp_name);
  fsync_dir(dir, fsync_label, hook);
}

void replace_file_durably(const std::string& path, uint64_t expected_bytes,
                          const std::function<void(DurableWriter&)>& body) {
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const std::string tmp_name = name + ".tmp-" + random_hex16();
  try {
    DurableWriter w(dir, tmp_name, nullptr, expected_bytes);
    body(w);
    w.finish();
    rename_checked(dir + "/" + tmp_name, path, "rename " + name, nullptr, dir, tmp_name);
  } catch (...) {
    ::unlink((dir + "/" + tmp_name).c_str());
    throw;
  }
  fsync_dir(dir, "fsync dir", nullptr);
}

std::string read_small_file(const std::string& path, uint64_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw_checkpoint(path + ": " + errno_string(errno));
  if (static_cast<uint64_t>(st.st_size) > max_bytes)
    throw_checkpoint(path + " is " + std::to_string(st.st_size) + " bytes, more than the " +
                     std::to_string(max_bytes) + " allowed for it");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_checkpoint(path + ": cannot open for reading");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string random_hex16() {
  std::random_device rd;  // /dev/urandom on Linux
  const uint64_t v = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace flotilla::ckpt
