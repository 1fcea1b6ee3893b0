// libFuzzer target (docs/reliability.md F3): the Hugging Face tokenizer.json loader (the file a user's model
// folder brings) and, when it loads, the encoder on a fixed multilingual text. Invariants: a refusal is
// Error(kData) naming the file; an accepted tokenizer encodes without crashing, every id is below
// vocab_size(), and decode(encode(text)) gives bytes back without an unknown-id error; and no id in the
// file sizes memory (RELIABILITY A9): the id table stays within twice the input's size plus 64 Ki
// entries, and the process's peak RSS under 1 GiB.
#include <sys/resource.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/tokenizer/bpe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string name = "fuzz/tokenizer.json";
  flotilla::Tokenizer tokenizer;
  try {
    tokenizer = flotilla::Tokenizer::from_hf_json(text, name);
  } catch (const flotilla::Error& e) {
    if (e.code() != flotilla::ExitCode::kData || std::string(e.what()).find(name) == std::string::npos)
      std::abort();
    return 0;
  }
  static const std::string sample =
      "Hello, world! It's 2026: naïve café, 東京, Привет,  \t\n tabs & <|endoftext|> 123456";
  const std::vector<uint32_t> ids = tokenizer.encode(sample, true);
  const auto vocab = static_cast<uint32_t>(tokenizer.vocab_size());
  if (vocab > 2 * size + 65536) std::abort();
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  if (usage.ru_maxrss > (1L << 20)) std::abort();  // KiB: 1 GiB
  for (const uint32_t id : ids)
    if (id >= vocab) std::abort();
  (void)tokenizer.decode(ids);
  return 0;
}
