// Session: resolve the target, connect, enforce the host-key policy, authenticate, reconnect.
// (Running commands is in session_exec.cpp.) See session.h for the policy.
#include "remote/session.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "remote/session_impl.h"
#include "remote/ssh_config.h"
#include "remote/validate.h"

namespace flotilla::remote {
namespace {

void init_libssh() {
  static std::once_flag once;
  std::call_once(once, [] { ssh_init(); });
}

std::string local_home() {
  if (const char* h = std::getenv("HOME"); h && *h) return h;
  if (const passwd* pw = getpwuid(getuid())) return pw->pw_dir;
  return "/";
}

std::string local_user() {
  if (const passwd* pw = getpwuid(getuid())) return pw->pw_name;
  if (const char* u = std::getenv("USER")) return u;
  return "";
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

void set_option(ssh_session s, ssh_options_e opt, const void* value, const char* name) {
  if (ssh_options_set(s, opt, value) != SSH_OK)
    throw Error(ExitCode::kInternal, std::string("libssh refused option ") + name + ": " + ssh_get_error(s));
}

void set_timeout(ssh_session s, double seconds) {
  long sec = static_cast<long>(seconds);
  long usec = static_cast<long>((seconds - static_cast<double>(sec)) * 1e6);
  set_option(s, SSH_OPTIONS_TIMEOUT, &sec, "timeout");
  set_option(s, SSH_OPTIONS_TIMEOUT_USEC, &usec, "timeout_usec");
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

// Wipes a secret before its memory is released.
void wipe(std::string& s) {
  volatile char* p = s.data();
  for (size_t i = 0; i < s.size(); ++i) p[i] = 0;
  s.clear();
}

ResolvedTarget resolve(const SessionOptions& o) {
  if (std::string p = validate_host(o.host); !p.empty()) throw_usage(p);
  if (o.known_hosts_path.empty())
    throw_usage("the app's known_hosts path is empty; a session needs its own known_hosts file");
  const std::string home = local_home();
  SshConfigEntry cfg;
  if (o.ssh_config_path != "none") {
    const std::string path = o.ssh_config_path.empty() ? home + "/.ssh/config" : o.ssh_config_path;
    std::ifstream f(path);
    if (f) {
      std::stringstream text;
      text << f.rdbuf();
      cfg = parse_ssh_config(text.str(), o.host, home, local_user());
    }
  }
  ResolvedTarget t;
  t.host = o.host;
  if (cfg.host_name) {
    if (std::string p = validate_host(*cfg.host_name); !p.empty())
      throw_usage("~/.ssh/config gives HostName for '" + o.host + "' that is not acceptable: " + p);
    t.host = *cfg.host_name;
  }
  if (o.port != 0) {
    if (std::string p = validate_port_number(o.port); !p.empty()) throw_usage(p);
    t.port = o.port;
  } else {
    t.port = cfg.port.value_or(22);
  }
  t.user = !o.user.empty() ? o.user : cfg.user.value_or(local_user());
  if (std::string p = validate_user(t.user); !p.empty()) throw_usage(p);
  auto add = [&](const std::string& f) {
    if (!f.empty() &&
        std::find(t.identity_files.begin(), t.identity_files.end(), f) == t.identity_files.end())
      t.identity_files.push_back(f);
  };
  add(o.identity_file);
  for (const auto& f : cfg.identity_files) add(f);
  for (const char* name : {"id_ed25519", "id_ecdsa", "id_rsa"}) add(home + "/.ssh/" + name);
  return t;
}

}  // namespace

std::string ResolvedTarget::known_hosts_name() const {
  return port == 22 ? host : "[" + host + "]:" + std::to_string(port);
}

std::string Session::Impl::where() const {
  return target.user + "@" + target.host + ":" + std::to_string(target.port);
}

void Session::Impl::require_alive(const char* doing) const {
  if (!alive || !ssh)
    throw ConnectionLost("not connected to " + where() + " (" + doing + "); connect or reconnect first");
}

void Session::Impl::lost(const std::string& doing) {
  const std::string detail = ssh ? ssh_get_error(ssh) : "";
  alive = false;
  throw ConnectionLost("connection to " + where() + " lost while " + doing +
                       (detail.empty() ? "" : ": " + detail) +
                       ". Runs started detached keep going on the node; reconnect to re-attach.");
}

void Session::Impl::close() {
  for (sftp_session* p : sftps)
    if (*p) {
      sftp_free(*p);
      *p = nullptr;
    }
  sftps.clear();
  if (ssh) {
    if (ssh_is_connected(ssh)) ssh_disconnect(ssh);
    ssh_free(ssh);
  }
  ssh = nullptr;
  alive = false;
  home.clear();
}

namespace {

// Opens the transport (TCP + key exchange) and reads the host key; no authentication.
ssh_known_hosts_e open_transport(Session::Impl& m) {
  init_libssh();
  m.close();
  m.ssh = ssh_new();
  if (!m.ssh) throw Error(ExitCode::kInternal, "libssh could not allocate a session");
  const ResolvedTarget& t = m.target;
  const int port = t.port;
  const bool off = false, on = true;
  const int log = SSH_LOG_NOLOG, strict = 1;
  set_option(m.ssh, SSH_OPTIONS_PROCESS_CONFIG, &off, "process_config");  // before anything else
  set_option(m.ssh, SSH_OPTIONS_HOST, t.host.c_str(), "host");
  set_option(m.ssh, SSH_OPTIONS_PORT, &port, "port");
  set_option(m.ssh, SSH_OPTIONS_USER, t.user.c_str(), "user");
  set_option(m.ssh, SSH_OPTIONS_KNOWNHOSTS, m.opt.known_hosts_path.c_str(), "knownhosts");
  set_option(m.ssh, SSH_OPTIONS_GLOBAL_KNOWNHOSTS, "/dev/null", "global_knownhosts");
  set_option(m.ssh, SSH_OPTIONS_STRICTHOSTKEYCHECK, &strict, "stricthostkeycheck");
  set_option(m.ssh, SSH_OPTIONS_LOG_VERBOSITY, &log, "log_verbosity");
  set_option(m.ssh, SSH_OPTIONS_NODELAY, &on, "nodelay");
  set_option(m.ssh, SSH_OPTIONS_PASSWORD_AUTH, &off, "password_auth");
  set_option(m.ssh, SSH_OPTIONS_KBDINT_AUTH, &off, "kbdint_auth");
  set_option(m.ssh, SSH_OPTIONS_GSSAPI_AUTH, &off, "gssapi_auth");
  set_option(m.ssh, SSH_OPTIONS_PUBKEY_AUTH, &on, "pubkey_auth");
  set_timeout(m.ssh, m.opt.connect_timeout_s);
  if (ssh_connect(m.ssh) != SSH_OK) {
    const std::string e = ssh_get_error(m.ssh);
    m.close();
    throw ConnectionLost("cannot connect to " + m.where() + ": " + e +
                         ". Check the host, the port and that sshd runs on the node.");
  }
  ssh_key key = nullptr;
  if (ssh_get_server_publickey(m.ssh, &key) != SSH_OK) {
    m.close();
    throw ConnectionLost("no host key received from " + m.where());
  }
  m.fingerprint = sha256_fingerprint(key);
  m.key_type = ssh_key_type_to_char(ssh_key_type(key));
  ssh_key_free(key);
  return ssh_session_is_known_server(m.ssh);
}

[[noreturn]] void refuse(Session::Impl& m, ssh_known_hosts_e state) {
  const std::string name = m.target.known_hosts_name();
  const std::string presented = m.key_type + " " + m.fingerprint;
  const std::string file = m.opt.known_hosts_path;
  std::vector<std::string> known = known_fingerprints(file, name);
  m.close();  // before anything is authenticated or run
  if (state == SSH_KNOWN_HOSTS_CHANGED || state == SSH_KNOWN_HOSTS_OTHER) {
    const bool other = state == SSH_KNOWN_HOSTS_OTHER;
    throw HostKeyError(
        other ? HostKeyProblem::kOtherType : HostKeyProblem::kChanged, name, m.fingerprint, known,
        "REFUSED: the host key of " + name +
            (other ? " is of another type than the one on record" : " has CHANGED") +
            ". The server presented " + presented + "; the app's known_hosts (" + file + ") records " +
            (known.empty() ? std::string("a different key") : join(known, ", ")) +
            ". This is what a man-in-the-middle attack looks like, or the node was reinstalled. Nothing was "
            "sent to it (no authentication, no command). Remedy: ask the node's administrator for its "
            "fingerprint (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub on the node); only if it matches " +
            m.fingerprint + ", forget the old key of " + name +
            " (in a terminal: `flotilla nodes forget-key " +
            (m.opt.node_name.empty() ? "NODE" : m.opt.node_name) +
            "`; in the app: Nodes > Forget host key) and trust the new one.");
  }
  if (state == SSH_KNOWN_HOSTS_ERROR)
    throw HostKeyError(HostKeyProblem::kUnknown, name, m.fingerprint, known,
                       "cannot read the app's known_hosts file " + file + " to check " + name +
                           "; the host is treated as untrusted. Check the file's permissions.");
  throw HostKeyError(HostKeyProblem::kUnknown, name, m.fingerprint, known,
                     "host " + name + " is not yet trusted: it presented the " + presented +
                         " key. Verify this fingerprint with the node's administrator, then trust it "
                         "(Nodes > Trust, or `flotilla nodes trust NAME --fingerprint " +
                         m.fingerprint + "`).");
}

std::string auth_or_throw(Session::Impl& m) {
  std::vector<std::string> tried;
  int rc = ssh_userauth_none(m.ssh, nullptr);
  if (rc == SSH_AUTH_SUCCESS) return "none";
  if (rc == SSH_AUTH_ERROR) m.lost("authenticating");
  if (m.opt.use_agent && std::getenv("SSH_AUTH_SOCK")) {
    rc = ssh_userauth_agent(m.ssh, nullptr);
    if (rc == SSH_AUTH_SUCCESS) return "agent";
    if (rc == SSH_AUTH_ERROR && !ssh_is_connected(m.ssh)) m.lost("authenticating with the agent");
    tried.push_back("ssh-agent (no key accepted)");
  }
  for (const std::string& path : m.target.identity_files) {
    if (!file_exists(path)) continue;
    // Offer the public half first, so a passphrase is asked only for a key the server accepts.
    if (file_exists(path + ".pub")) {
      ssh_key pub = nullptr;
      if (ssh_pki_import_pubkey_file((path + ".pub").c_str(), &pub) == SSH_OK) {
        rc = ssh_userauth_try_publickey(m.ssh, nullptr, pub);
        ssh_key_free(pub);
        if (rc == SSH_AUTH_ERROR) m.lost("authenticating");
        if (rc != SSH_AUTH_SUCCESS) {
          tried.push_back(path + " (not accepted)");
          continue;
        }
      }
    }
    ssh_key key = nullptr;
    if (ssh_pki_import_privkey_file(path.c_str(), nullptr, nullptr, nullptr, &key) != SSH_OK) {
      std::optional<std::string> pass = m.opt.passphrase ? m.opt.passphrase(path) : std::nullopt;
      if (!pass) {
        tried.push_back(path + " (encrypted or unreadable; no passphrase given)");
        continue;
      }
      rc = ssh_pki_import_privkey_file(path.c_str(), pass->c_str(), nullptr, nullptr, &key);
      wipe(*pass);
      if (rc != SSH_OK) {
        tried.push_back(path + " (wrong passphrase or unreadable key)");
        continue;
      }
    }
    rc = ssh_userauth_publickey(m.ssh, nullptr, key);
    ssh_key_free(key);
    if (rc == SSH_AUTH_SUCCESS) return path;
    if (rc == SSH_AUTH_ERROR) m.lost("authenticating");
    tried.push_back(path + " (not accepted)");
  }
  const std::string who = m.where();
  m.close();
  throw AuthError(
      "authentication to " + who + " failed; tried: " +
      (tried.empty() ? std::string("no agent and no key file found") : join(tried, ", ")) +
      ". Add your public key to the node's ~/.ssh/authorized_keys, load it into ssh-agent, or choose "
      "the key file in the node's settings.");
}

}  // namespace

Session::Session(SessionOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->target = resolve(options);
  impl_->opt = std::move(options);
}

Session::~Session() { impl_->close(); }

void Session::connect() {
  Impl& m = *impl_;
  if (m.alive) return;
  const ssh_known_hosts_e state = open_transport(m);
  if (state != SSH_KNOWN_HOSTS_OK) refuse(m, state);
  auth_or_throw(m);
  set_timeout(m.ssh, m.opt.read_timeout_s);
  m.alive = true;
  if (!m.shell_checked) check_login_shell();
}

// Every command reaches the node through the login shell, quoted for POSIX sh (S8). A shell that
// parses differently (csh, fish, ...) could give quoted text another meaning, so the first
// connect asks the shell to do something only a POSIX shell does (an assignment, then an
// expansion) and refuses the node before anything else runs when the answer is wrong (S9).
void Session::check_login_shell() {
  Impl& m = *impl_;
  const ExecResult r = exec("flotilla_sh=posix; printf 'flotilla-shell:%s\\n' \"$flotilla_sh\"", 30);
  if (r.exit_status == 0 && r.out == "flotilla-shell:posix\n") {
    m.shell_checked = true;
    return;
  }
  std::string said = r.err.empty() ? r.out : r.err;
  if (const auto nl = said.find('\n'); nl != std::string::npos) said.resize(nl);
  if (said.size() > 160) said.resize(160);
  const std::string who = m.where();
  m.close();
  throw Error(ExitCode::kConfig,
              "unsupported login shell on " + who + ": it is not a POSIX shell (a test assignment gave '" +
                  printable(said) +
                  "'); Flotilla quotes commands for POSIX sh. Give the account a POSIX login shell "
                  "(chsh -s /bin/bash on the node) or use another account");
}

void Session::trust(const std::string& fingerprint) {
  Impl& m = *impl_;
  const ssh_known_hosts_e state = open_transport(m);
  if (state == SSH_KNOWN_HOSTS_CHANGED || state == SSH_KNOWN_HOSTS_OTHER || state == SSH_KNOWN_HOSTS_ERROR)
    refuse(m, state);
  const std::string name = m.target.known_hosts_name();
  if (fingerprint != m.fingerprint) {
    const std::string presented = m.fingerprint;
    m.close();
    throw HostKeyError(
        HostKeyProblem::kUnknown, name, presented, known_fingerprints(m.opt.known_hosts_path, name),
        "not trusted: " + name + " presented the key " + presented + ", not the " + printable(fingerprint) +
            " you confirmed. Nothing was written. Check the fingerprint with the node's administrator.");
  }
  if (state != SSH_KNOWN_HOSTS_OK) {
    char* entry = nullptr;
    if (ssh_session_export_known_hosts_entry(m.ssh, &entry) != SSH_OK || !entry) {
      m.close();
      throw Error(ExitCode::kInternal, "libssh could not format a known_hosts entry for " + name);
    }
    const std::string line = entry;
    ssh_string_free_char(entry);
    m.close();
    append_known_host_line(m.opt.known_hosts_path, line);
  }
  m.close();
}

void Session::reconnect(const Backoff& backoff) {
  Impl& m = *impl_;
  m.close();
  double delay = backoff.initial_s;
  std::string last;
  for (int attempt = 1; attempt <= std::max(1, backoff.attempts); ++attempt) {
    try {
      connect();
      return;
    } catch (const HostKeyError&) {
      throw;
    } catch (const AuthError&) {
      throw;
    } catch (const Error& e) {
      last = e.what();
    }
    if (attempt == backoff.attempts) break;
    std::this_thread::sleep_for(std::chrono::duration<double>(delay));
    delay = std::min(delay * backoff.factor, backoff.max_delay_s);
  }
  throw ConnectionLost("could not reconnect to " + m.where() + " after " + std::to_string(backoff.attempts) +
                       " attempts; last error: " + last);
}

void Session::disconnect() { impl_->close(); }

bool Session::connected() const { return impl_->alive && impl_->ssh && ssh_is_connected(impl_->ssh); }

const ResolvedTarget& Session::target() const { return impl_->target; }

std::string Session::host_fingerprint() const { return impl_->fingerprint; }

}  // namespace flotilla::remote
