// An SSH session to one node: connect, verify the host key, authenticate, run commands.
//
// Decision: every libssh option is set explicitly and libssh's own ~/.ssh/config processing is
// off. The host key is checked against the app's own known_hosts file only (the global file is
// /dev/null), so nothing a user's ssh config says (StrictHostKeyChecking no, UserKnownHostsFile
// /dev/null, ProxyCommand ...) can weaken the policy or run a program. ~/.ssh/config is read by
// our own small parser (ssh_config.h) for Host/HostName/Port/User/IdentityFile and nothing else.
//
// Host key policy (docs/reliability.md S1-S3): OK -> authenticate; UNKNOWN (or no known_hosts file) ->
// HostKeyError carrying the SHA256 fingerprint, so the caller can ask the user and call trust();
// CHANGED or OTHER (another key type on record) -> HostKeyError before any authentication, with
// both fingerprints and the remedy; the known_hosts file is never touched by a refusal.
//
// Threading: the API is blocking. Every call may wait for the network (bounded by the connect
// and read timeouts), so call it from a worker thread, never from a UI thread. One Session must
// not be used by two threads at once; separate Sessions are independent.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/error.h"

namespace flotilla::remote {

// Asked for the passphrase of an encrypted private key (`key_path`); nullopt = skip this key.
// The returned string is used once and wiped; nothing is stored.
using PassphraseFn = std::function<std::optional<std::string>(const std::string& key_path)>;

struct SessionOptions {
  std::string host;                 // a host name, an IPv4 address, [IPv6], or a Host alias of ~/.ssh/config
  int port = 0;                     // 0: from ~/.ssh/config, else 22
  std::string user;                 // "": from ~/.ssh/config, else the local user name
  std::string identity_file;        // "": IdentityFile of ~/.ssh/config, then ~/.ssh/id_{ed25519,ecdsa,rsa}
  std::string known_hosts_path;     // the app's own known_hosts file (required)
  std::string ssh_config_path;      // "": $HOME/.ssh/config; "none": read no ssh config
  bool use_agent = true;            // try ssh-agent ($SSH_AUTH_SOCK) before key files
  double connect_timeout_s = 10;    // TCP connect + key exchange
  double read_timeout_s = 15;       // any single wait for the server (also the keepalive deadline)
  double keepalive_interval_s = 5;  // a silent exec pings the server this often
  PassphraseFn passphrase;          // may be empty: encrypted keys are then skipped
  std::string node_name;            // the stored node this session is for ("": none); named in remedies
};

// Where a session actually goes, after ~/.ssh/config (every field validated).
struct ResolvedTarget {
  std::string host;  // the address or name libssh connects to
  int port = 22;
  std::string user;
  std::vector<std::string> identity_files;  // in the order they are tried
  std::string known_hosts_name() const;     // "host" for port 22, else "[host]:port"
};

enum class HostKeyProblem { kUnknown, kChanged, kOtherType };

// The server's host key is not trusted. what() is the full message for the user (both
// fingerprints and the remedy); the fields let a dialog show them separately.
class HostKeyError : public Error {
 public:
  HostKeyError(HostKeyProblem problem, std::string host, std::string presented,
               std::vector<std::string> known, const std::string& message)
      : Error(ExitCode::kComm, message),
        problem_(problem),
        host_(std::move(host)),
        presented_(std::move(presented)),
        known_(std::move(known)) {}
  HostKeyProblem problem() const { return problem_; }
  const std::string& host() const { return host_; }            // known_hosts name, e.g. [10.0.0.5]:2222
  const std::string& presented() const { return presented_; }  // "SHA256:..." of the server's key
  const std::vector<std::string>& known() const {
    return known_;
  }  // fingerprints on record (type: SHA256:...)

 private:
  HostKeyProblem problem_;
  std::string host_, presented_;
  std::vector<std::string> known_;
};

// Authentication failed (no agent key or key file was accepted).
class AuthError : public Error {
 public:
  explicit AuthError(const std::string& m) : Error(ExitCode::kComm, m) {}
};

// The connection died or stopped answering (peer closed, reset, keepalive deadline passed).
// Remote processes started detached keep running; reconnect() and re-attach.
class ConnectionLost : public Error {
 public:
  explicit ConnectionLost(const std::string& m) : Error(ExitCode::kComm, m) {}
};

struct ExecResult {
  int exit_status = -1;  // the remote command's exit status (-1: none reported, e.g. killed by a signal)
  std::string out, err;  // stdout and stderr, each capped at 64 MiB
};

// Reconnection schedule: delays initial, initial*factor, ... capped at max_delay; give up after
// `attempts` tries. Host-key and authentication failures are never retried.
struct Backoff {
  double initial_s = 0.5;
  double factor = 2;
  double max_delay_s = 10;
  int attempts = 6;
};

class Session {
 public:
  // Validates and resolves the options (reads ~/.ssh/config); throws Error(kUsage) naming the
  // field for a bad host, user, port or missing known_hosts path. Does not connect.
  explicit Session(SessionOptions options);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Connects, checks the host key (see the policy above), authenticates. No-op when connected.
  void connect();
  // Accepts the server's key after the user confirmed `fingerprint` ("SHA256:..."): connects if
  // needed, and appends exactly one line to the app's known_hosts only when the presented key has
  // that fingerprint and the host is UNKNOWN. A mismatch, or a CHANGED/OTHER host, throws
  // HostKeyError and writes nothing. Leaves the session disconnected; call connect() next.
  void trust(const std::string& fingerprint);
  // Drops the connection and connects again on the backoff schedule (sleeping in between).
  void reconnect(const Backoff& backoff = {});
  void disconnect();
  bool connected() const;

  // Runs `command` through the remote user's login shell (a POSIX shell is assumed: every
  // untrusted word must be shell_quote()d by the caller; see exec_argv). Waits at most
  // `timeout_s` for it to finish (then sends TERM, closes the channel and throws Error(kComm)).
  // `input` is written to the command's stdin, then EOF. Throws ConnectionLost if the link dies.
  ExecResult exec(const std::string& command, double timeout_s = 60, std::string_view input = {});
  // exec() of argv, each word single-quoted: the remote program receives exactly these bytes.
  ExecResult exec_argv(const std::vector<std::string>& argv, double timeout_s = 60);
  // One round trip that needs the server to answer (opens and closes a channel): a keepalive
  // with a deadline of read_timeout_s. Throws ConnectionLost when it gets no answer.
  void ping();

  const ResolvedTarget& target() const;
  // "SHA256:..." of the host key seen by the last connect ("" before any).
  std::string host_fingerprint() const;
  // The remote $HOME (absolute), read once per connection.
  const std::string& remote_home();
  // Rewrites "~/x" and "~" to the remote home; other paths are returned unchanged.
  std::string expand_home(const std::string& path);

  struct Impl;
  Impl& impl() { return *impl_; }  // for sftp.cpp and friends; opaque outside remote/

 private:
  void check_login_shell();  // from connect(): refuses a non-POSIX login shell (S9)

  std::unique_ptr<Impl> impl_;
};

// Removes every known_hosts line for `known_hosts_name` (e.g. "[127.0.0.1]:2222") from the app's
// file (atomically, by rewrite + rename); returns how many were removed. The remedy for a host
// whose key legitimately changed, once the user has verified the new fingerprint.
int forget_host_key(const std::string& known_hosts_path, const std::string& known_hosts_name);

}  // namespace flotilla::remote
