// How the headless commands reach a stored node: session options and the passphrase prompt.
//
// Decision: the known_hosts file is the workspace's own (next to the run database), never
// ~/.ssh/known_hosts; a key's passphrase is read from the controlling terminal with echo off,
// used once by libssh and never written anywhere (docs/reliability.md S10). Without a terminal, an
// encrypted key is skipped (ssh-agent still works).
#pragma once

#include <string>

#include "app/cli/cli.h"
#include "db/nodes.h"
#include "remote/session.h"

namespace flotilla::cli {

// <folder of the run database>/known_hosts.
std::string known_hosts_path(const Context& ctx);
remote::SessionOptions node_session_options(const Context& ctx, const db::SshNode& node);
// The exact command that trusts `fingerprint` for node `name`.
std::string trust_command(const std::string& name, const std::string& fingerprint);
// For a HostKeyError: the library's message, plus (unknown host) the exact trust command.
std::string host_key_message(const std::string& node, const remote::HostKeyError& e);

}  // namespace flotilla::cli
