// libFuzzer target (docs/reliability.md F1): the run-config parser. Any bytes either parse into a config or
// are refused with Error(kConfig); a parsed config validates without crashing, and
// parse -> config_to_toml -> parse is a fixed point (the second text equals the first).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/config/config_io.h"
#include "engine/config/config_validate.h"
#include "engine/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  flotilla::RunConfig config;
  try {
    config = flotilla::parse_config_toml(text, "fuzz.toml");
  } catch (const flotilla::Error& e) {
    if (e.code() != flotilla::ExitCode::kConfig || std::string(e.what()).empty()) std::abort();
    return 0;
  }
  (void)flotilla::validate(config, 0);
  const std::string once = flotilla::config_to_toml(config);
  const std::string twice = flotilla::config_to_toml(flotilla::parse_config_toml(once, "round-trip.toml"));
  if (once != twice) std::abort();  // not a fixed point
  return 0;
}
