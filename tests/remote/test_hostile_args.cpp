// Hostile input against a real sshd (docs/reliability.md S7, S8), plus the start guard (S5) and stop,
// using a fake worker script that records its argv: names, users and run ids with shell
// metacharacters are rejected before anything reaches libssh or a shell; paths and arguments
// reach the node byte for byte; a canary file is never created.
#include "check.h"
#include "remote/remote_run.h"
#include "remote/sftp.h"
#include "remote/validate.h"
#include "sshd_fixture.h"

using namespace flotilla::remote;
using namespace flotilla_test;

namespace {

std::string joined0(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) {
    out += s;
    out.push_back('\0');
  }
  return out;
}

}  // namespace

int main() {
  if (const std::string why = SshdFixture::unavailable(); !why.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return 0;
  }
  SshdFixture fx("remote_hostile");
  if (!fx.start(0)) {
    std::printf("SKIP: sshd cannot run as this user here: %s\n", fx.last_error().c_str());
    return 0;
  }
  const std::string canary = fx.root() + "/CANARY";
  const std::vector<std::string> hostile = {
      "-oProxyCommand=touch${IFS}" + canary,
      "a;touch " + canary,
      "$(touch " + canary + ")",
      "`touch " + canary + "`",
      "host\nProxyCommand touch " + canary,
      "host name",
      "127.0.0.1%0a",
      "-p22",
      "h'ost",
      "h\"ost",
      std::string(300, 'a'),
      "h\xc3\xa9llo",  // non-ASCII look-alike
      "a|touch " + canary,
      "a&&touch " + canary,
  };

  // S7: rejected at input, field named; nothing connects.
  for (const auto& h : hostile) {
    SessionOptions o = fx.options(0);
    o.host = h;
    CHECK_THROWS(Session s(o), "host");
    o = fx.options(0);
    o.user = h;
    CHECK_THROWS(Session s(o), "user");
    RemoteRunSpec spec;
    spec.run_id = h;
    CHECK(!validate_run_id(h).empty());
    spec.run_id = "ok-run";
    spec.master_addr = h;
    spec.worker = "/bin/true";
    Session s(fx.options(0));
    CHECK_THROWS(start_remote_run(s, spec), "master address");
  }
  for (const char* p : {"0", "65536", "22abc", "-1", "", " 22", "022"}) CHECK(!validate_port(p).empty());
  {
    SessionOptions o = fx.options(0);
    o.port = 70000;
    CHECK_THROWS(Session s(o), "port");
  }
  for (const char* id : {"../../etc", "..", ".hidden", "-rf", "a/b", "run 1", "r;x", "r\nx", "$(id)", ""})
    CHECK(!validate_run_id(id).empty());
  CHECK(validate_run_id("run-2024.01_a") == "");

  Session s(fx.options(0));
  trust_and_connect(s);

  // S8: arguments reach the remote program byte for byte.
  const std::vector<std::string> args = {"a b",
                                         "it's",
                                         "\"dq\"",
                                         "$HOME",
                                         "$(touch " + canary + ")",
                                         "`touch " + canary + "`",
                                         "; touch " + canary,
                                         "-rf",
                                         "*",
                                         "../../x",
                                         "new\nline",
                                         "\\",
                                         "tab\there",
                                         "!",
                                         "{a,b}",
                                         "~",
                                         "#"};
  std::vector<std::string> argv = {"printf", "%s\\0"};
  argv.insert(argv.end(), args.begin(), args.end());
  const ExecResult r = s.exec_argv(argv);
  CHECK(r.exit_status == 0);
  CHECK_MSG(r.out == joined0(args), "got %zu bytes", r.out.size());
  CHECK_THROWS(s.exec_argv({"echo", std::string("nul\0byte", 8)}), "NUL");

  // SFTP with a hostile directory and file name: created literally, verified, read back.
  {
    Sftp sftp(s);
    const std::string dir = "~/data dir/it's $(touch " + canary + ");x/`id`";
    sftp.mkdir_p(dir);
    const std::string file = dir + "/-f *.txt";
    const std::string data = "payload\n'quoted' $(not run)\n";
    const std::string sha = sftp.upload_bytes(data, file, 0640);
    CHECK(sha == sha256_hex(data));
    const std::string local = fx.node(0).home + "/data dir/it's $(touch " + canary + ");x/`id`/-f *.txt";
    CHECK(read_file(local) == data);
    const RemoteStat st = sftp.stat(file);
    CHECK(st.exists && !st.is_dir && st.size == data.size() && st.mode == 0640);
    CHECK(sftp.remote_sha256(file) == sha);
    CHECK_THROWS(sftp.upload_bytes("x", "~/bad\nname"), "line break");
    const auto entries = sftp.list(dir);
    CHECK(entries.size() == 1 && entries[0].name == "-f *.txt");
  }

  // S8 + S5 through the run starter: a fake worker records its argv, then sleeps.
  {
    Sftp sftp(s);
    const std::string fake = s.remote_home() + "/fake-worker";
    sftp.upload_bytes("#!/bin/sh\nprintf '%s\\0' \"$@\" > \"$HOME/argv.bin\"\nexec sleep 30\n", fake, 0755);
    RemoteRunSpec spec;
    spec.run_id = "hostile-1";
    spec.worker = fake;
    spec.nnodes = 2;
    spec.node_rank = 1;
    spec.master_addr = "10.0.0.1";
    spec.master_port = 29511;
    spec.config_path = "~/x/it's a $(config).toml";
    spec.train_args = {"--set", "run.name=$(touch " + canary + ")", "--set", "data.path=a b;c `d`"};
    spec.env = {"FLOTILLA_TEST_VALUE=$(touch " + canary + ") 'q'"};
    const RemoteRunStatus st = start_remote_run(s, spec);
    CHECK(st.state == RunState::kRunning && st.pid > 0 && st.started_at > 0);
    const std::string dir = fx.node(0).home + "/.flotilla/runs/hostile-1";
    CHECK(wait_until([&] { return !read_file(fx.node(0).home + "/argv.bin").empty(); }, 10));
    const std::vector<std::string> expect = {"launch",
                                             "--nproc-per-node",
                                             "1",
                                             "--nnodes",
                                             "2",
                                             "--node-rank",
                                             "1",
                                             "--master-addr",
                                             "10.0.0.1",
                                             "--master-port",
                                             "29511",
                                             "--",
                                             "train",
                                             "--config",
                                             spec.config_path,
                                             "--out-dir",
                                             dir,
                                             "--set",
                                             "run.name=$(touch " + canary + ")",
                                             "--set",
                                             "data.path=a b;c `d`"};
    CHECK_MSG(read_file(fx.node(0).home + "/argv.bin") == joined0(expect), "%s",
              printable(read_file(fx.node(0).home + "/argv.bin")).c_str());
    // The environment entry arrived literally too.
    // (worker.pid is written by the wrapper after the stand-in worker starts: wait for it.)
    CHECK(wait_until(
        [&] {
          const std::string wpid = read_file(dir + "/worker.pid");
          return std::atol(wpid.c_str()) > 0 &&
                 read_file("/proc/" + std::to_string(std::atol(wpid.c_str())) + "/environ")
                         .find("FLOTILLA_TEST_VALUE=$(touch " + canary + ") 'q'") != std::string::npos;
        },
        10));

    // S5: a second start is refused while it runs, naming the pid; then also after it exited.
    try {
      start_remote_run(s, spec);
      CHECK_MSG(false, "second start was not refused");
    } catch (const RunAlreadyStarted& e) {
      CHECK(std::string(e.what()).find("already active (pid " + std::to_string(st.pid)) != std::string::npos);
      CHECK(e.status().state == RunState::kRunning);
    }
    Session other(fx.options(0));  // a second app instance
    CHECK_THROWS(start_remote_run(other, spec), "already active");
    CHECK(remote_run_status(other, "hostile-1").state == RunState::kRunning);

    const RemoteRunStatus stopped = stop_remote_run(s, "hostile-1", 5);
    CHECK(stopped.state == RunState::kExited);
    CHECK_MSG(stopped.exit_code == 143, "exit %d", stopped.exit_code);  // sleep got the forwarded TERM
    CHECK(!process_alive(static_cast<pid_t>(st.pid)));
    CHECK_THROWS(start_remote_run(s, spec), "was already started");
    // A restart allowed, with a worker that ignores TERM: killed after the grace period, with its
    // whole session (137 recorded for it).
    sftp.upload_bytes("#!/bin/sh\ntrap '' TERM\nsleep 30\n", fake, 0755);
    spec.allow_restart = true;
    const RemoteRunStatus again = start_remote_run(s, spec);
    CHECK(again.state == RunState::kRunning && again.pid != st.pid);
    const RemoteRunStatus killed = stop_remote_run(s, "hostile-1", 0.5);
    CHECK(killed.state == RunState::kExited && killed.exit_code == 137);
    CHECK(!process_alive(static_cast<pid_t>(again.pid)));
    CHECK(remote_run_status(s, "never-started").state == RunState::kNotStarted);
  }
  CHECK(!std::filesystem::exists(canary));
  return summary("remote_hostile_args");
}
