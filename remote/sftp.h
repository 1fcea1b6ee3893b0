// File transfer over a Session's SFTP channel: atomic uploads with a checksum check, downloads,
// stat, mkdir -p, directory listing and byte-range reads (for tailing a growing file).
//
// Decision: an upload is written to a hidden temporary name next to its destination, verified by
// SHA-256 (the node's `sha256sum`, or by reading the file back when the node has none), given
// its mode, and only then renamed over the destination with `mv -f` (rename(2): atomic on one
// file system; SFTP's own rename refuses to replace). A reader on the node sees the old file or
// the whole new one, never a torn one. Paths travel as SFTP strings (no shell) except in the
// rename and the checksum, where they are single-quoted. "~/..." means the remote home.
//
// Blocking, like Session: call from a worker thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "remote/session.h"

namespace flotilla::remote {

struct RemoteStat {
  bool exists = false;
  bool is_dir = false;
  uint64_t size = 0;
  uint32_t mode = 0;  // permission bits
  int64_t mtime = 0;  // seconds since the epoch
};

struct RemoteEntry {
  std::string name;
  bool is_dir = false;
  uint64_t size = 0;
};

class Sftp {
 public:
  // Opens the SFTP subsystem on a connected session (connects it if needed).
  explicit Sftp(Session& session);
  ~Sftp();
  Sftp(const Sftp&) = delete;
  Sftp& operator=(const Sftp&) = delete;

  RemoteStat stat(const std::string& path);
  // Creates `path` and its missing parents with `mode`; an existing directory is fine.
  void mkdir_p(const std::string& path, uint32_t mode = 0700);
  // Uploads a local file atomically (see above); returns its SHA-256 (hex). Throws Error(kIo)
  // when the checksum of the uploaded bytes differs; the destination is then left untouched.
  std::string upload_file(const std::string& local_path, const std::string& remote_path,
                          uint32_t mode = 0644);
  // Same for bytes in memory (a config file).
  std::string upload_bytes(const std::string& data, const std::string& remote_path, uint32_t mode = 0644);
  // Downloads to `local_path` (temporary name, fsync, rename); returns the SHA-256 of the bytes.
  std::string download(const std::string& remote_path, const std::string& local_path);
  // Up to `max_bytes` from `offset` (fewer at the end of the file; "" past it).
  std::string read_range(const std::string& remote_path, uint64_t offset, size_t max_bytes);
  // Entries of a directory, without "." and "..", sorted by name.
  std::vector<RemoteEntry> list(const std::string& remote_dir);
  void remove(const std::string& remote_path);
  // SHA-256 (hex) of a remote file: `sha256sum` on the node, else read back over SFTP.
  std::string remote_sha256(const std::string& remote_path);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// SHA-256 (lower-case hex) of a local file or of bytes.
std::string sha256_file(const std::string& path);
std::string sha256_hex(const std::string& data);

// Refuses remote paths no policy allows: empty, NUL, newline or carriage return (Error kUsage).
void check_remote_path(const std::string& path);

}  // namespace flotilla::remote
