// Test fixture: real OpenSSH servers on 127.0.0.1 playing "nodes" (ENV.md's verified recipe).
//
// Each node is one `sshd -D` on a free port with its own host key and its own HOME (sshd_config
// `SetEnv HOME=...`, so ~/.flotilla of each node is a separate folder under the test's temporary
// directory even though every node logs in as the same local user). The client key is authorized
// for all nodes. sshd is started with PR_SET_PDEATHSIG, and the destructor stops every server, its
// session processes and any detached run left in a node's ~/.flotilla/runs: no orphans.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "remote/session.h"
#include "worker_run.h"

namespace flotilla_test {

// First contact with a test node: accept whatever key it presents, then connect.
inline void trust_and_connect(flotilla::remote::Session& s) {
  try {
    s.connect();
    return;
  } catch (const flotilla::remote::HostKeyError& e) {
    s.trust(e.presented());
  }
  s.connect();
}

inline int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

inline bool port_open(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}

// Field `index` (1-based, after the command) of /proc/PID/stat: 2 = ppid, 4 = session.
inline long proc_stat_field(pid_t pid, int index) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  std::getline(f, s);
  const auto close_paren = s.rfind(')');
  if (close_paren == std::string::npos) return -1;
  std::istringstream in(s.substr(close_paren + 2));
  std::string w;
  for (int i = 1; i <= index && in >> w; ++i)
    if (i == index) return std::atol(w.c_str());
  return -1;
}

// A process that exists and is not a zombie (an orphan's zombie lingers until init reaps it).
inline bool process_alive(pid_t pid) {
  if (kill(pid, 0) != 0) return false;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  std::getline(f, s);
  const auto close_paren = s.rfind(')');
  return close_paren != std::string::npos && close_paren + 2 < s.size() && s[close_paren + 2] != 'Z';
}

inline std::vector<pid_t> all_pids() {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string n = e.path().filename();
    if (!n.empty() && n.find_first_not_of("0123456789") == std::string::npos) out.push_back(std::atoi(n.c_str()));
  }
  return out;
}

// SIGKILLs every process of session `sid` (a detached run and all its ranks).
inline void kill_session(pid_t sid) {
  if (sid <= 1) return;
  for (pid_t p : all_pids())
    if (proc_stat_field(p, 4) == sid) kill(p, SIGKILL);
}

inline std::string local_user_name() {
  const passwd* pw = getpwuid(getuid());
  return pw ? pw->pw_name : "";
}

class SshdFixture {
 public:
  struct Node {
    int port = 0;
    std::string home, config, log;
    pid_t pid = -1;
  };

  explicit SshdFixture(const std::string& name) : root_(fresh_dir(name)) {
    std::filesystem::create_directories(root_ + "/keys");
    client_key_ = root_ + "/keys/client";
    keygen("ed25519", client_key_);
    std::filesystem::copy_file(client_key_ + ".pub", root_ + "/keys/authorized_keys");
    ::mkdir("/run/sshd", 0755);  // privilege separation directory (root)
  }
  ~SshdFixture() {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      stop(static_cast<int>(i));
      kill_runs(static_cast<int>(i));
    }
  }

  // "" when sshd can be used here, else why not (the ssh tests then skip).
  static std::string unavailable() {
    if (access("/usr/sbin/sshd", X_OK) != 0) return "/usr/sbin/sshd is not installed (apt-get install openssh-server)";
    if (system("command -v ssh-keygen >/dev/null 2>&1") != 0) return "ssh-keygen is not installed";
    return "";
  }

  const std::string& root() const { return root_; }
  const std::string& client_key() const { return client_key_; }
  std::string known_hosts() const { return root_ + "/app_known_hosts"; }

  // Host key file for (node, type), created once: restarting with the same file keeps the key.
  std::string host_key(int node, const std::string& type) {
    const std::string path = root_ + "/keys/host" + std::to_string(node) + "_" + type;
    if (access(path.c_str(), R_OK) != 0) keygen(type, path);
    return path;
  }

  // Starts node `i` (0, 1, ...) with a host key of `type`; same port on restart. False when sshd
  // did not come up within 10 s (its log is in last_error()).
  // `extra` is appended to the node's sshd_config (e.g. a ForceCommand); `env` ("NAME=value ...")
  // joins HOME on the one SetEnv line (sshd uses only the first SetEnv line).
  bool start(int i, const std::string& key_type = "ed25519", const std::string& key_file = "",
             const std::string& extra = "", const std::string& env = "") {
    if (static_cast<size_t>(i) >= nodes_.size()) nodes_.resize(static_cast<size_t>(i) + 1);
    Node& n = nodes_[static_cast<size_t>(i)];
    if (n.port == 0) n.port = free_port();
    n.home = root_ + "/node" + std::to_string(i) + "-home";
    std::filesystem::create_directories(n.home);
    n.config = root_ + "/sshd" + std::to_string(i) + ".conf";
    n.log = root_ + "/sshd" + std::to_string(i) + ".log";
    const std::string key = key_file.empty() ? host_key(i, key_type) : key_file;
    write_text(n.config, "ListenAddress 127.0.0.1\nPort " + std::to_string(n.port) + "\nHostKey " + key +
                             "\nPidFile " + root_ + "/sshd" + std::to_string(i) + ".pid\nAuthorizedKeysFile " +
                             root_ + "/keys/authorized_keys\n"
                             "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                             "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
                             "Subsystem sftp internal-sftp\nSetEnv HOME=" +
                             n.home + (env.empty() ? "" : " " + env) + "\nMaxStartups 50\nLogLevel ERROR\n" + extra);
    n.pid = fork();
    if (n.pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      const int fd = open(n.log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      execl("/usr/sbin/sshd", "/usr/sbin/sshd", "-D", "-e", "-f", n.config.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    const bool up = wait_until([&] { return port_open(n.port) || waitpid(n.pid, nullptr, WNOHANG) == n.pid; }, 10) &&
                    port_open(n.port);
    if (!up) error_ = "sshd for node " + std::to_string(i) + " did not start: " + read_file(n.log);
    return up;
  }

  // Stops node i's listener and every session process under it. The listener is frozen first, so
  // a client reconnecting meanwhile cannot get a fresh session that outlives the node.
  void stop(int i) {
    Node& n = nodes_[static_cast<size_t>(i)];
    if (n.pid <= 0) return;
    kill(n.pid, SIGSTOP);
    kill_sessions(i, SIGKILL);
    kill(n.pid, SIGKILL);
    waitpid(n.pid, nullptr, 0);
    n.pid = -1;
    wait_until([&] { return !port_open(n.port); }, 5);
  }

  // Signals the per-connection sshd processes of node i (not the listener): S4/S6.
  int kill_sessions(int i, int sig) {
    const pid_t listener = nodes_[static_cast<size_t>(i)].pid;
    int count = 0;
    std::vector<pid_t> pids = all_pids();
    for (pid_t p : pids) {
      // Descendant of the listener whose command is still sshd (not a shell or a detached run).
      pid_t a = p;
      bool under = false;
      for (int depth = 0; depth < 4 && a > 1; ++depth) {
        a = static_cast<pid_t>(proc_stat_field(a, 2));
        if (a == listener) under = true;
      }
      if (!under) continue;
      const std::string cmd = read_file("/proc/" + std::to_string(p) + "/cmdline");
      if (cmd.rfind("sshd", 0) == 0 && kill(p, sig) == 0) ++count;
    }
    return count;
  }

  // Kills detached runs found in node i's ~/.flotilla/runs/*/pid (test cleanup).
  void kill_runs(int i) {
    const std::string runs = nodes_[static_cast<size_t>(i)].home + "/.flotilla/runs";
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(runs, ec)) {
      const std::string pid = read_file(e.path().string() + "/pid");
      if (!pid.empty()) kill_session(static_cast<pid_t>(std::atol(pid.c_str())));
    }
  }

  const Node& node(int i) const { return nodes_[static_cast<size_t>(i)]; }
  const std::string& last_error() const { return error_; }

  flotilla::remote::SessionOptions options(int i) const {
    flotilla::remote::SessionOptions o;
    o.host = "127.0.0.1";
    o.port = nodes_[static_cast<size_t>(i)].port;
    o.user = local_user_name();
    o.identity_file = client_key_;
    o.known_hosts_path = known_hosts();
    o.ssh_config_path = "none";
    o.use_agent = false;
    o.connect_timeout_s = 5;
    o.read_timeout_s = 5;
    o.keepalive_interval_s = 1;
    return o;
  }

 private:
  static void keygen(const std::string& type, const std::string& path) {
    const std::string cmd = "ssh-keygen -q -t " + type + " -N '' -C flotilla-test -f '" + path + "' </dev/null >/dev/null";
    if (system(cmd.c_str()) != 0) std::fprintf(stderr, "ssh-keygen failed: %s\n", cmd.c_str());
  }

  std::string root_, client_key_, error_;
  std::vector<Node> nodes_;
};

// For tests of the app against fixture nodes: starts nodes 0..count-1 and gives this process a
// fresh HOME (no ~/.ssh config or keys), no agent and one OpenMP thread per rank. "" when ready,
// else why the test should skip.
inline std::string start_app_nodes(SshdFixture& fx, int count, const std::string& client_home) {
  if (std::string why = SshdFixture::unavailable(); !why.empty()) return why;
  for (int i = 0; i < count; ++i)
    if (!fx.start(i)) return "sshd cannot run as this user here: " + fx.last_error();
  std::filesystem::create_directories(client_home);
  setenv("HOME", client_home.c_str(), 1);
  unsetenv("SSH_AUTH_SOCK");
  setenv("OMP_NUM_THREADS", "1", 1);
  return "";
}

}  // namespace flotilla_test
