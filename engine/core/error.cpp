// Names of exit codes and errno formatting.
#include "engine/core/error.h"

#include <cstring>

namespace flotilla {

const char* exit_code_name(ExitCode code) {
  switch (code) {
    case ExitCode::kOk:
      return "ok";
    case ExitCode::kInternal:
      return "internal error";
    case ExitCode::kUsage:
      return "usage error";
    case ExitCode::kConfig:
      return "config error";
    case ExitCode::kData:
      return "data error";
    case ExitCode::kCheckpoint:
      return "checkpoint error";
    case ExitCode::kIo:
      return "I/O error";
    case ExitCode::kComm:
      return "communication failure";
    case ExitCode::kOutOfMemory:
      return "out of memory";
    case ExitCode::kPreempted:
      return "preempted";
    case ExitCode::kStalled:
      return "stalled";
  }
  return "unknown";
}

std::string errno_string(int err) {
  char buf[256];
  // GNU strerror_r returns a pointer that may or may not be buf.
  const char* s = strerror_r(err, buf, sizeof buf);
  return std::string(s);
}

}  // namespace flotilla
