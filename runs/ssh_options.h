// How every part of Flotilla reaches a stored node or a cluster's login node over SSH: one set of
// session options (the workspace's own known_hosts, the timeouts and keepalive, the key file, the
// passphrase asked through the caller's callback), and the refusal of an untrusted host key in
// words, with the fix the caller's front end offers.
//
// Decision: the CLI, the app's runs, the Nodes and Clusters pages and the service's places all
// connect through ssh_session_options(), so a policy change (a timeout, the known_hosts file) is
// made once. A front end differs only in how it asks a passphrase (a terminal with echo off, a
// dialog) and how it tells a user to trust a key (a command, the Nodes page): both come in as
// values of SshAccess.
#pragma once

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

#include "db/nodes.h"

// Declared only: a front end includes this header without the SSH layer.
namespace flotilla::remote {
struct SessionOptions;
class HostKeyError;
class Session;
}  // namespace flotilla::remote

namespace flotilla::runs {

// Asks the passphrase of an encrypted key (`node`: the stored node's or cluster's name); nullopt:
// no answer (the key is skipped; ssh-agent still works). Never stored.
using PassphraseAsk =
    std::function<std::optional<std::string>(const std::string& node, const std::string& key_path)>;

// A host key the session layer refused, as a front end words it.
struct HostKeyRefusal {
  std::string node;  // the stored node's or cluster's name
  std::string what;  // the session layer's message
  enum class Problem { kUnknown, kChanged, kOtherType, kOther } problem = Problem::kOther;
  std::string presented;  // the fingerprint the host presented ("" when none)
  bool cluster = false;   // a cluster's login node
};

struct SshAccess {
  std::string database_path;  // the workspace's run store: its known_hosts is next to it
  PassphraseAsk passphrase;   // empty: encrypted keys are skipped
  // How a refused key is said (default: the CLI's words, with the `flotilla nodes trust` command).
  std::function<std::string(const HostKeyRefusal&)> host_key_text;
};

// <folder of the run database>/known_hosts.
std::string workspace_known_hosts(const std::string& database_path);

// The one set of session options for `node` (a stored node, or a cluster's login node as
// login_node() gives it).
remote::SessionOptions ssh_session_options(const SshAccess& access, const db::SshNode& node);

HostKeyRefusal host_key_refusal(const std::string& node, const remote::HostKeyError& e, bool cluster = false);
// The CLI's words: the library's message, plus the exact command that trusts (or forgets) the key.
std::string host_key_cli_text(const HostKeyRefusal& r);
// The words `access` gives (its host_key_text, else the CLI's).
std::string host_key_text(const SshAccess& access, const HostKeyRefusal& r);
// The exact command that trusts `fingerprint` for node `name`.
std::string trust_command(const std::string& name, const std::string& fingerprint);

// A host key problem, a node that does not answer, or anything else that refuses an operation
// before it changes anything: the sentence to show (what, where, what to do).
class Refusal : public std::runtime_error {
 public:
  explicit Refusal(const std::string& what) : std::runtime_error(what) {}
};

// Connects `session` to `name` (a stored node, or a cluster's login node: `cluster`); a host key
// problem becomes a Refusal in the access's words, any other failure throws as connect() does.
void connect_or_refuse(const SshAccess& access, remote::Session& session, const std::string& name,
                       bool cluster = false);

}  // namespace flotilla::runs
