// libFuzzer target (docs/reliability.md F1): our ~/.ssh/config reader (remote/ssh_config.h), which reads a
// file the user's other tools write. Invariants: no crash on any bytes; a port it returns is 1-65535; a value
// it returns holds no newline or NUL (it could not have come from one line); patterns never match a host
// through a negation.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "remote/ssh_config.h"

namespace {
void check_value(const std::string& v) {
  if (v.find('\n') != std::string::npos || v.find('\0') != std::string::npos) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const char* host : {"gpu-box", "10.0.0.7", "node1.example.org"}) {
    const flotilla::remote::SshConfigEntry e = flotilla::remote::parse_ssh_config(text, host, "/home/u", "u");
    if (e.port && (*e.port < 1 || *e.port > 65535)) std::abort();
    if (e.host_name) check_value(*e.host_name);
    if (e.user) check_value(*e.user);
    for (const std::string& f : e.identity_files) check_value(f);
  }
  if (size > 1) {  // the first half as a pattern, the rest as a value
    const std::string_view pattern = text.substr(0, size / 2), value = text.substr(size / 2);
    (void)flotilla::remote::ssh_pattern_match(pattern, value);
  }
  return 0;
}
