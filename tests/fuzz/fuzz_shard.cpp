// libFuzzer target (docs/reliability.md C9/F2): the token-shard header reader. The input is written as a
// shard file (on /dev/shm when present) and inspected with token checking on: it is accepted, or
// refused with Error(kData) naming the file; never a crash or an oversized read.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/core/error.h"
#include "engine/data/loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = std::string(access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") +
                                  "/flotilla-fuzz-shard-" + std::to_string(getpid()) + ".bin";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return 0;
  size_t off = 0;
  while (off < size) {
    const ssize_t put = ::write(fd, data + off, size - off);
    if (put <= 0) break;
    off += static_cast<size_t>(put);
  }
  ::close(fd);
  try {
    (void)flotilla::inspect_shard(path, 50257, true);
  } catch (const flotilla::Error& e) {
    if (e.code() != flotilla::ExitCode::kData || std::string(e.what()).find(path) == std::string::npos)
      std::abort();
  }
  return 0;
}
