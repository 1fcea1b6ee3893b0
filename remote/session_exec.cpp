// Running commands on a connected Session: exec with stdout/stderr/exit status, a deadline and
// keepalives; ping; the remote home directory.
//
// Decision: liveness is checked by a request the server must answer (opening a channel), not by
// libssh's fire-and-forget keepalive, whose result cannot be observed. A command that prints
// nothing for keepalive_interval_s triggers such a ping, so a dead or stopped peer is noticed
// within keepalive_interval_s + read_timeout_s even while a long silent command runs.
#include <chrono>

#include "remote/session_impl.h"
#include "remote/validate.h"

namespace flotilla::remote {
namespace {

constexpr size_t kMaxOutput = 64u << 20;

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Channel {
  ssh_channel ch = nullptr;
  ~Channel() {
    if (ch) {
      ssh_channel_close(ch);
      ssh_channel_free(ch);
    }
  }
};

// Reads what is available on one stream of `ch` without blocking; false on a read error.
bool drain(ssh_channel ch, int is_stderr, std::string& into) {
  char buf[16384];
  while (true) {
    const int n = ssh_channel_read_nonblocking(ch, buf, sizeof buf, is_stderr);
    if (n == SSH_ERROR) return false;
    if (n <= 0) return true;
    if (into.size() < kMaxOutput) into.append(buf, static_cast<size_t>(n));
  }
}

}  // namespace

void Session::ping() {
  Impl& m = *impl_;
  m.require_alive("keepalive");
  Channel c;
  c.ch = ssh_channel_new(m.ssh);
  if (!c.ch || ssh_channel_open_session(c.ch) != SSH_OK) m.lost("waiting for a keepalive answer");
}

ExecResult Session::exec(const std::string& command, double timeout_s, std::string_view input) {
  Impl& m = *impl_;
  m.require_alive("running a command");
  Channel c;
  c.ch = ssh_channel_new(m.ssh);
  if (!c.ch) m.lost("opening a channel");
  if (ssh_channel_open_session(c.ch) != SSH_OK) m.lost("opening a channel");
  if (ssh_channel_request_exec(c.ch, command.c_str()) != SSH_OK) m.lost("starting a command");
  size_t sent = 0;
  while (sent < input.size()) {
    const int n = ssh_channel_write(c.ch, input.data() + sent, static_cast<uint32_t>(input.size() - sent));
    if (n < 0) m.lost("writing a command's input");
    sent += static_cast<size_t>(n);
  }
  if (ssh_channel_send_eof(c.ch) != SSH_OK) m.lost("closing a command's input");

  ExecResult r;
  const auto start = Clock::now();
  auto last_heard = start;
  char buf[16384];
  while (true) {
    const int n = ssh_channel_read_timeout(c.ch, buf, sizeof buf, 0, 100);
    if (n == SSH_ERROR) m.lost("reading a command's output");
    if (n > 0) {
      if (r.out.size() < kMaxOutput) r.out.append(buf, static_cast<size_t>(n));
      last_heard = Clock::now();
    }
    const size_t err_before = r.err.size();
    if (!drain(c.ch, 1, r.err)) m.lost("reading a command's output");
    if (r.err.size() != err_before) last_heard = Clock::now();
    if (ssh_channel_is_eof(c.ch)) break;
    if (!ssh_is_connected(m.ssh)) m.lost("reading a command's output");
    if (seconds_since(start) > timeout_s) {
      ssh_channel_request_send_signal(c.ch, "TERM");
      const std::string prefix = printable(command);
      throw Error(ExitCode::kComm, "command on " + m.where() + " did not finish within " +
                                       std::to_string(static_cast<int>(timeout_s)) +
                                       " s (sent TERM): " + prefix);
    }
    if (seconds_since(last_heard) > m.opt.keepalive_interval_s) {
      ping();
      last_heard = Clock::now();
    }
  }
  if (!drain(c.ch, 0, r.out) || !drain(c.ch, 1, r.err)) m.lost("reading a command's output");
  r.exit_status = ssh_channel_get_exit_status(c.ch);
  if (r.exit_status < 0 && !ssh_is_connected(m.ssh)) m.lost("waiting for a command's exit status");
  return r;
}

ExecResult Session::exec_argv(const std::vector<std::string>& argv, double timeout_s) {
  std::string cmd;
  for (const auto& a : argv) {
    if (!cmd.empty()) cmd += ' ';
    cmd += shell_quote(a);
  }
  return exec(cmd, timeout_s);
}

const std::string& Session::remote_home() {
  Impl& m = *impl_;
  if (!m.home.empty()) return m.home;
  const ExecResult r = exec("printf '%s' \"$HOME\"", m.opt.read_timeout_s);
  if (r.exit_status != 0 || r.out.empty() || r.out[0] != '/' || r.out.find('\n') != std::string::npos)
    throw Error(ExitCode::kComm, "cannot read the home directory of " + m.where() + " (got '" +
                                     printable(r.out) + "', exit " + std::to_string(r.exit_status) +
                                     "); is the login shell a POSIX shell?");
  m.home = r.out;
  return m.home;
}

std::string Session::expand_home(const std::string& path) {
  if (path == "~") return remote_home();
  if (path.rfind("~/", 0) == 0) return remote_home() + path.substr(1);
  return path;
}

}  // namespace flotilla::remote
