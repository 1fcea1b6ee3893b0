// Idle autostop's wake (runs/autostop.h) against a real loopback sshd node: a stopped node's start
// command (a real script, its arguments hostile and passed verbatim) runs once, and wake waits for
// the node's probe over SSH, which answers only once the "cloud" (this test, on seeing the script's
// mark) has brought sshd up: the node is then on, with an event saying so. A node already on is not
// started again; a start command that fails, or a node that never answers within the probe
// timeout, leaves it stopped with the reason.
#include <sys/stat.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "db/database.h"
#include "db/node_power.h"
#include "db/nodes.h"
#include "runs/autostop.h"
#include "runs/node_ops.h"
#include "sshd_fixture.h"
#include "store_fixture.h"

using namespace flotilla_test;
namespace db = flotilla::db;
namespace runs = flotilla::runs;
namespace fs = std::filesystem;

namespace {

std::string script(const std::string& dir, const std::string& name, const std::string& record, int status) {
  const std::string p = dir + "/" + name;
  store_test::write_bytes(p, "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\0' \"$a\"; done >> '" + record +
                                 "'\nprintf 'END\\0' >> '" + record + "'\nexit " + std::to_string(status) +
                                 "\n");
  ::chmod(p.c_str(), 0755);
  return p;
}

size_t count_ends(const std::string& record) {
  const std::string b = store_test::read_bytes(record);
  size_t n = 0;
  for (size_t at = b.find(std::string("END\0", 4)); at != std::string::npos;
       at = b.find(std::string("END\0", 4), at + 1))
    ++n;
  return n;
}

}  // namespace

int main() {
  if (const std::string why = SshdFixture::unavailable(); !why.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return 0;
  }
  SshdFixture fx("runs_autostop_wake");
  if (!fx.start(0)) {
    std::printf("SKIP: sshd cannot run as this user here: %s\n", fx.last_error().c_str());
    return 0;
  }
  const std::string ws = fx.root() + "/ws";
  fs::create_directories(ws);
  runs::SshAccess access;
  access.database_path = ws + "/store.db";
  db::Database d(access.database_path);
  db::SshNode n;
  n.name = "vm-1";
  n.host = "127.0.0.1";
  n.port = fx.node(0).port;
  n.user = local_user_name();
  n.key_path = fx.client_key();
  const int64_t id = db::add_ssh_node(d, n);
  // Trust its key while it is up, then "stop" it.
  try {
    runs::check_node(access, d, "vm-1");
  } catch (const runs::Refusal& e) {
    const std::string m = e.what();
    const size_t at = m.find("SHA256:");
    size_t end = at + 7;
    while (end < m.size() &&
           (std::isalnum(static_cast<unsigned char>(m[end])) || m[end] == '+' || m[end] == '/'))
      ++end;
    runs::trust_host_key(access, d, "vm-1", m.substr(at, end - at));
  }
  runs::check_node(access, d, "vm-1");
  fx.stop(0);

  const std::string record = fx.root() + "/start.args";
  const std::string mark = fx.root() + "/started";
  const std::string start_sh = fx.root() + "/start.sh";
  store_test::write_bytes(start_sh, "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\0' \"$a\"; done >> '" +
                                        record + "'\nprintf 'END\\0' >> '" + record + "'\ntouch '" + mark +
                                        "'\n");
  ::chmod(start_sh.c_str(), 0755);
  db::NodePower p;
  p.node_id = id;
  p.idle_limit_s = 60;
  p.stop_argv = {"true"};
  p.start_argv = {start_sh, "vm-1; touch " + fx.root() + "/pwned", "$(id)"};
  db::set_node_power(d, p);
  db::set_power_state(d, id, db::kPowerStopped, db::now_seconds());

  runs::AutostopOptions o;
  o.probe_timeout_s = 30;
  o.probe_interval_s = 0.3;
  runs::IdleAutostop a(o, access);
  // wake runs on a thread; this (main) thread plays the cloud: it brings sshd up 1 s after the start
  // command ran (sshd must be started by the thread that owns the fixture).
  std::atomic<bool> woke{false}, done{false};
  std::string why;
  const auto t0 = std::chrono::steady_clock::now();
  std::thread waker([&] {
    woke = a.wake(d, "vm-1", &why);
    done = true;
  });
  while (!fs::exists(mark) && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(fs::exists(mark));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  CHECK(!done);  // still waiting for the probe: sshd is down
  CHECK(fx.start(0));
  waker.join();
  CHECK_MSG(woke, "%s", why.c_str());
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::seconds(1));
  CHECK(db::node_power(d, id)->state == db::kPowerOn);
  CHECK(count_ends(record) == 1);
  const std::string args = store_test::read_bytes(record);
  CHECK(args == std::string("vm-1; touch " + fx.root() + "/pwned") + '\0' + "$(id)" + '\0' + "END" + '\0');
  CHECK(!fs::exists(fx.root() + "/pwned"));
  CHECK(store_test::raw_text(access.database_path,
                             "SELECT message FROM events WHERE kind = 'autostop' ORDER BY id DESC LIMIT 1")
            .find("node vm-1 started for queued work") != std::string::npos);

  // On already: nothing runs.
  CHECK(a.wake(d, "vm-1", &why));
  CHECK(count_ends(record) == 1);

  // A start command that fails: stopped, with its exit status, no probe wait.
  const std::string failing = script(fx.root(), "fail.sh", fx.root() + "/fail.args", 4);
  p.start_argv = {failing, "vm-1"};
  db::set_node_power(d, p);
  db::set_power_state(d, id, db::kPowerStopped, db::now_seconds());
  CHECK(!a.wake(d, "vm-1", &why));
  CHECK_MSG(why.find("exit status 4") != std::string::npos, "%s", why.c_str());
  CHECK(db::node_power(d, id)->state == db::kPowerStopped);

  // A node that never answers within the probe timeout: stopped again, saying so.
  fx.stop(0);
  p.start_argv = {script(fx.root(), "noop.sh", fx.root() + "/noop.args", 0)};
  db::set_node_power(d, p);
  runs::AutostopOptions quick = o;
  quick.probe_timeout_s = 1.5;
  runs::IdleAutostop b(quick, access);
  CHECK(!b.wake(d, "vm-1", &why));
  CHECK_MSG(why.find("did not answer its probe within") != std::string::npos, "%s", why.c_str());
  CHECK(db::node_power(d, id)->state == db::kPowerStopped);
  return summary("test_autostop_wake_ssh");
}
