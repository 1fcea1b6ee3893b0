// Internal to remote/: the libssh state behind a Session, shared by session.cpp, sftp.cpp and
// the other remote/*.cpp files. Never include this from a public header or from ui/ (it pulls in
// libssh, which is linked PRIVATE).
#pragma once

#include <libssh/libssh.h>
#include <libssh/sftp.h>

#include <string>
#include <vector>

#include "remote/session.h"

namespace flotilla::remote {

struct Session::Impl {
  SessionOptions opt;
  ResolvedTarget target;
  ssh_session ssh = nullptr;
  bool alive = false;          // connected, host key verified and authenticated
  std::string fingerprint;     // SHA256 of the host key seen by the last connect
  std::string key_type;        // e.g. ssh-ed25519
  std::string home;            // remote $HOME, cached per connection
  bool shell_checked = false;  // the login shell was found to be POSIX (once per Session)
  // SFTP sessions open on this connection (the `sftp` member of each live Sftp): close() frees
  // them before the libssh session they belong to, and nulls them so a stale Sftp reports a lost
  // connection instead of touching freed memory.
  std::vector<sftp_session*> sftps;

  // "user@host:port", for messages.
  std::string where() const;
  // Throws ConnectionLost unless alive.
  void require_alive(const char* doing) const;
  // Marks the session dead and throws ConnectionLost naming what was being done and libssh's error.
  [[noreturn]] void lost(const std::string& doing);
  // Frees the libssh session (after a disconnect message when the link is up).
  void close();
};

// known_hosts helpers (known_hosts.cpp).
// "type SHA256:..." for each key recorded for `name` in `path` (unhashed entries).
std::vector<std::string> known_fingerprints(const std::string& path, const std::string& name);
// Appends one line (a trailing newline is added) to `path`, creating it 0600 and its directory 0700.
void append_known_host_line(const std::string& path, const std::string& line);
// "SHA256:..." of a libssh key ("" on failure).
std::string sha256_fingerprint(ssh_key key);

}  // namespace flotilla::remote
