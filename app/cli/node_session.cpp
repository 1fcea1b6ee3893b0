// Session options for stored nodes and the no-echo passphrase prompt (see node_session.h).
#include "app/cli/node_session.h"

#include <fcntl.h>
#include <termios.h>
#include <unistd.h>

#include <cstring>
#include <optional>

#include "remote/node_fields.h"

namespace flotilla::cli {
namespace {

// Reads one line from /dev/tty with echo off; nullopt without a terminal.
std::optional<std::string> ask_passphrase(const std::string& key_path) {
  const int fd = ::open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return std::nullopt;
  const std::string prompt = "Passphrase for " + key_path + " (not stored): ";
  if (::write(fd, prompt.data(), prompt.size()) < 0) {
    ::close(fd);
    return std::nullopt;
  }
  termios old{};
  const bool have_termios = ::tcgetattr(fd, &old) == 0;
  if (have_termios) {
    termios quiet = old;
    quiet.c_lflag &= ~static_cast<tcflag_t>(ECHO);
    ::tcsetattr(fd, TCSAFLUSH, &quiet);
  }
  std::string line;
  char c = 0;
  while (::read(fd, &c, 1) == 1 && c != '\n') line.push_back(c);
  if (have_termios) ::tcsetattr(fd, TCSAFLUSH, &old);
  if (::write(fd, "\n", 1) < 0) {
  }
  ::close(fd);
  return line;
}

}  // namespace

std::string known_hosts_path(const Context& ctx) {
  return remote::workspace_known_hosts_path(database_path(ctx));
}

remote::SessionOptions node_session_options(const Context& ctx, const db::SshNode& node) {
  remote::SessionOptions o;
  o.host = node.host;
  o.port = node.port;
  o.user = node.user;
  o.identity_file = node.key_path;
  o.known_hosts_path = known_hosts_path(ctx);
  o.connect_timeout_s = 10;
  o.read_timeout_s = 15;
  o.keepalive_interval_s = 5;
  o.passphrase = ask_passphrase;
  o.node_name = node.name;
  return o;
}

std::string trust_command(const std::string& name, const std::string& fingerprint) {
  return "flotilla nodes trust " + name + " --fingerprint " + fingerprint;
}

std::string host_key_message(const std::string& node, const remote::HostKeyError& e) {
  std::string m = "node " + node + ": " + e.what();
  if (e.problem() == remote::HostKeyProblem::kUnknown && !e.presented().empty())
    m += "\nAfter verifying it, run:\n  " + trust_command(node, e.presented());
  if ((e.problem() == remote::HostKeyProblem::kChanged ||
       e.problem() == remote::HostKeyProblem::kOtherType) &&
      !e.presented().empty())
    m += "\nOnly after verifying the new fingerprint with the node's administrator, run:\n  flotilla nodes "
         "forget-key " +
         node + "\n  " + trust_command(node, e.presented());
  return m;
}

}  // namespace flotilla::cli
