// libssh version query (see ssh_info.h).
#include "remote/ssh_info.h"

#include <libssh/libssh.h>

namespace flotilla::remote {

std::string libssh_version() {
  const char* v = ssh_version(0);  // 0: no minimum required; returns the version string
  return v ? v : "unknown";
}

}  // namespace flotilla::remote
