// Validation and quoting of everything that reaches a remote shell or an ssh command line
// (docs/reliability.md, "Remote commands"; fault row S7).
//
// Decision: allow-lists, not deny-lists. A host is a DNS name, a dotted IPv4 address or a
// bracketed IPv6 address and nothing else; a user is a portable POSIX user name; a port is 1-65535
// written in plain digits. The explicit checks for a leading '-', whitespace, NUL and shell
// metacharacters come first only so the message says exactly why a value was refused. Values
// that pass are still single-quoted with shell_quote() wherever they meet a shell.
#pragma once

#include <string>
#include <string_view>

namespace flotilla::remote {

// Each validator returns "" when the value is acceptable, else one sentence that starts with the
// field name ("host", "user", "port"), shows the value with control bytes escaped, and says why.
std::string validate_host(std::string_view host);
std::string validate_user(std::string_view user);
std::string validate_port(std::string_view port);
std::string validate_port_number(long port);

// Wraps `arg` in single quotes for a POSIX shell, writing each ' as '\'' , so the shell passes it
// through as exactly one word with no expansion. Throws flotilla::Error(kUsage) for a NUL byte,
// which no command line can carry.
std::string shell_quote(std::string_view arg);

// `value` made safe to show in a message: control bytes escaped (\n, \x00), at most 60 characters.
std::string printable(std::string_view value);

}  // namespace flotilla::remote
