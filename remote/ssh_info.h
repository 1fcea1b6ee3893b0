// Facts about the SSH library in use, for the About box and `flotilla --version`.
// Kept behind a plain function so the UI never includes a libssh header (STYLE.md principle 1).
#pragma once

#include <string>

namespace flotilla::remote {

// libssh's run-time version string, e.g. "0.10.6/openssl/zlib".
std::string libssh_version();

}  // namespace flotilla::remote
