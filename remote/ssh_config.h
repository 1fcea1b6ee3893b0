// A deliberately small reader of OpenSSH client config files (~/.ssh/config).
//
// Decision: only Host, HostName, Port, User and IdentityFile are read; every other keyword is
// ignored, including the ones that weaken host-key checking (StrictHostKeyChecking,
// UserKnownHostsFile) or run programs (ProxyCommand, LocalCommand, Match exec). Match blocks are
// skipped whole and Include is not followed. Like OpenSSH, the first value found for a keyword
// wins, and Host patterns support '*', '?' and '!' negation. The values found here are validated
// by the caller (session.cpp) exactly like values typed by the user.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flotilla::remote {

struct SshConfigEntry {
  std::optional<std::string> host_name;
  std::optional<int> port;  // a Port that is not 1-65535 is left unset and reported in `problems`
  std::optional<std::string> user;
  std::vector<std::string> identity_files;  // all IdentityFile lines that apply, in order, '~' expanded
  std::vector<std::string> problems;        // lines that could not be used, "line N: why"
};

// Applies `text` (the content of an ssh config file) for the alias `host`. `home` expands a
// leading "~/" in IdentityFile; %d (home), %u (local user), %h (host) and %% are expanded too.
SshConfigEntry parse_ssh_config(std::string_view text, const std::string& host, const std::string& home,
                                const std::string& local_user);

// OpenSSH Host pattern matching: '*' any run, '?' one character, case-insensitive.
bool ssh_pattern_match(std::string_view pattern, std::string_view value);

}  // namespace flotilla::remote
