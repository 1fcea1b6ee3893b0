// Engine errors: the runtime-failure tier of STYLE.md's two-tier error policy.
//
// Bugs are asserts. Everything a user or the environment can cause (bad config, bad data, a
// damaged checkpoint, a full disk, a dead peer) is an flotilla::Error carrying the exit code the
// worker returns for it. Messages name the field, file, rank or host and say what to do.
#pragma once

#include <stdexcept>
#include <string>

namespace flotilla {

// Exit codes of flotilla-worker (documented in docs/worker.md; the app and launch rely on them).
enum class ExitCode : int {
  kOk = 0,
  kInternal = 1,     // a bug or an unexpected failure: report it
  kUsage = 2,        // bad command line
  kConfig = 3,       // the run config is invalid: never retried
  kData = 4,         // a data shard or tokenizer file is missing or damaged: never retried
  kCheckpoint = 5,   // no usable checkpoint / checkpoint write failed
  kIo = 6,           // file system failure (disk full, permission)
  kComm = 7,         // communication failure (peer died, timeout)
  kOutOfMemory = 8,  // allocation failed
  kPreempted = 10,   // stopped by SIGTERM/SIGINT; resumable: does not consume restarts
  kStalled = 11,     // launch: a rank made no progress within the timeout
};

const char* exit_code_name(ExitCode code);

class Error : public std::runtime_error {
 public:
  Error(ExitCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ExitCode code() const { return code_; }

 private:
  ExitCode code_;
};

[[noreturn]] inline void throw_config(const std::string& m) { throw Error(ExitCode::kConfig, m); }
[[noreturn]] inline void throw_data(const std::string& m) { throw Error(ExitCode::kData, m); }
[[noreturn]] inline void throw_io(const std::string& m) { throw Error(ExitCode::kIo, m); }
[[noreturn]] inline void throw_checkpoint(const std::string& m) { throw Error(ExitCode::kCheckpoint, m); }
[[noreturn]] inline void throw_usage(const std::string& m) { throw Error(ExitCode::kUsage, m); }

// "strerror(errno)" as a std::string, for I/O error messages.
std::string errno_string(int err);

}  // namespace flotilla
