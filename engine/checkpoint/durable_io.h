// Checked, fsynced file-system operations with a fault-injection point before each one.
//
// Decision: every primitive (each write(2) call, fsync, close, rename, directory fsync) first asks
// the CheckpointFaultHook with a stable label ("write rank-0.bin", "fsync MANIFEST.tmp", ...), so a
// test can fail or kill the process at exactly the Nth operation (docs/reliability.md C2/C7) without an
// LD_PRELOAD shim. The same helpers write the exported safetensors / llm.c files.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "engine/checkpoint/checkpoint.h"

namespace flotilla::ckpt {

// Asks `hook` (may be null or empty) about `label`. Returns 0 to proceed, or the errno to fail with.
int fault_errno(const CheckpointFaultHook* hook, const std::string& label);

// Throws Error(kIo) for an operation that failed with `err`:
//   "No space left on device while writing rank-0.bin in DIR (needed 12.0 MiB, free 0.3 MiB from statvfs)"
//   "Input/output error while fsync of MANIFEST.tmp in DIR; check the disk ..."
[[noreturn]] void throw_io_failure(int err, const std::string& action, const std::string& file,
                                   const std::string& dir, uint64_t needed_bytes);

// Free bytes for unprivileged users on the file system holding `path` (0 when statvfs fails).
uint64_t free_bytes(const std::string& path);

// Writes one new file in `dir`: every write(2) return checked (short writes continued, EINTR
// retried), finish() = fsync + close, both checked. Keeps a running CRC-32C of the bytes written.
// The destructor closes a file that was not finished (the failure path; the caller removes it).
class DurableWriter {
 public:
  // exclusive: O_EXCL (a fresh file in a fresh tmp dir); otherwise O_TRUNC (a scratch file such as
  // LATEST.tmp that a killed save may have left). expected_bytes is only for the ENOSPC message.
  DurableWriter(std::string dir, std::string name, const CheckpointFaultHook* hook, uint64_t expected_bytes,
                bool exclusive = true);
  ~DurableWriter();
  DurableWriter(const DurableWriter&) = delete;
  DurableWriter& operator=(const DurableWriter&) = delete;

  void write(const void* data, size_t size);
  void finish();

  uint32_t crc() const { return crc_; }
  uint64_t bytes_written() const { return written_; }
  const std::string& name() const { return name_; }

 private:
  std::string dir_, name_;
  const CheckpointFaultHook* hook_;
  uint64_t expected_;
  int fd_ = -1;
  uint64_t written_ = 0;
  uint32_t crc_ = 0;
};

// fsync of a directory (makes renames and creations inside it durable). `label` goes to the hook.
void fsync_dir(const std::string& dir, const std::string& label, const CheckpointFaultHook* hook);

// rename(2) with the hook and a checked result; `dir` and `what` only shape the error message.
void rename_checked(const std::string& from, const std::string& to, const std::string& label,
                    const CheckpointFaultHook* hook, const std::string& dir, const std::string& what);

// Writes `content` to dir/name atomically: dir/name.tmp (O_TRUNC), fsync, close, rename (hook label
// `rename_label`), fsync(dir) (hook label `fsync_label`).
void write_file_atomic(const std::string& dir, const std::string& name, const std::string& content,
                       const CheckpointFaultHook* hook, const std::string& rename_label,
                       const std::string& fsync_label);

// Creates or replaces the file at `path` crash-safely: `body` writes PATH.tmp-<hex> through the
// writer, then fsync, close, rename over PATH and fsync of its directory. On any failure the tmp file
// is removed and the Error propagates; an existing PATH is untouched. (Exports use this.)
void replace_file_durably(const std::string& path, uint64_t expected_bytes,
                          const std::function<void(DurableWriter&)>& body);

// Reads a whole small file (at most max_bytes; larger files throw Error(kCheckpoint)).
std::string read_small_file(const std::string& path, uint64_t max_bytes);

// 16 random lower-case hex digits from the OS entropy source (tmp directory suffixes).
std::string random_hex16();

}  // namespace flotilla::ckpt
