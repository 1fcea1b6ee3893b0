// Test fixture: a workspace for the headless `flotilla` command against sshd_fixture.h nodes.
//
// The command runs as a real process with its own HOME (no ~/.ssh/config, no default keys) and no
// agent, against the workspace database; each call's output goes to its own log file so a
// failing check can print it. Shared by the test_cli_* ssh tests.
#pragma once

#include <string>
#include <vector>

#include "sshd_fixture.h"

namespace flotilla_test {

inline bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

// "SHA256:..." of the `--fingerprint SHA256:...` in a host-key refusal; "" when absent.
inline std::string fingerprint_in(const std::string& text) {
  const auto at = text.find("--fingerprint SHA256:");
  if (at == std::string::npos) return "";
  const auto start = at + std::string("--fingerprint ").size();
  return text.substr(start, text.find_first_of(" \n`)", start) - start);
}

class CliWorkspace {
 public:
  // <root>/ws/flotilla.db, HOME <root>/client-home, logs in <root>.
  explicit CliWorkspace(const std::string& root)
      : db_(root + "/ws/flotilla.db"), home_(root + "/client-home"), log_dir_(root) {
    std::filesystem::create_directories(root + "/ws");
    std::filesystem::create_directories(home_);
  }

  const std::string& db() const { return db_; }
  const std::string& log_dir() const { return log_dir_; }
  std::vector<std::string> env() const { return {"HOME=" + home_, "SSH_AUTH_SOCK=", "OMP_NUM_THREADS=1"}; }

  // `flotilla --db DB args...` started in the background, its output in `log`.
  pid_t spawn(const std::vector<std::string>& args, const std::string& log) const {
    std::vector<std::string> argv = {FLOTILLA_CLI_PATH, "--db", db_};
    argv.insert(argv.end(), args.begin(), args.end());
    return flotilla_test::spawn(argv, env(), log);
  }

  // `flotilla --db DB args...` to completion.
  ProcResult run(const std::vector<std::string>& args) {
    const std::string log = log_dir_ + "/cli" + std::to_string(++calls_) + ".log";
    ProcResult r;
    r.exit_code = wait_exit(spawn(args, log));
    r.output = read_file(log);
    return r;
  }

  // nodes add NAME for fixture node i (127.0.0.1, its port, this user, the client key) with
  // `extra` options, then trusts the key it presents; false when either step failed.
  bool add_trusted_node(const SshdFixture& fx, int i, const std::string& name,
                        const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"nodes", "add", name, "--host", "127.0.0.1", "--port",
                                     std::to_string(fx.node(i).port), "--user", local_user_name(),
                                     "--key", fx.client_key()};
    args.insert(args.end(), extra.begin(), extra.end());
    if (run(args).exit_code != 0) return false;
    const std::string fp = fingerprint_in(run({"nodes", "probe", name}).output);
    return !fp.empty() && run({"nodes", "trust", name, "--fingerprint", fp}).exit_code == 0;
  }

 private:
  std::string db_, home_, log_dir_;
  int calls_ = 0;
};

}  // namespace flotilla_test
