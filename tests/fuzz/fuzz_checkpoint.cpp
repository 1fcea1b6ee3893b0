// libFuzzer target (docs/reliability.md F2): the checkpoint MANIFEST parser and the rank-file reader. The
// first byte picks the reader, the rest is its input. Any bytes are parsed or refused with
// Error(kCheckpoint); the rank-file reader never allocates more than the input holds (ASan's
// allocation limit turns a 2^62-byte request into a crash) and never reads past it.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/checkpoint/manifest.h"
#include "engine/checkpoint/rank_file.h"
#include "engine/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t* body = data + 1;
  const size_t n = size - 1;
  try {
    if (data[0] % 2 == 0) {
      (void)flotilla::ckpt::parse_manifest(std::string(reinterpret_cast<const char*>(body), n));
    } else {
      flotilla::ckpt::MemorySource src(body, n);
      const auto c =
          flotilla::ckpt::read_rank_file(src, n, "rank-0.bin", [](const std::string&) { return true; });
      uint64_t kept = 0;
      for (const auto& t : c.tensors) kept += t.data.size();
      if (kept > n) std::abort();  // sections handed out that the input cannot hold
    }
  } catch (const flotilla::Error& e) {
    if (e.code() != flotilla::ExitCode::kCheckpoint || std::string(e.what()).empty()) std::abort();
  }
  return 0;
}
