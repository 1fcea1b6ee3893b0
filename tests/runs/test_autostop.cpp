// Idle autostop (runs/autostop.h) against a real store and real scripts as the stop commands:
// - the stop command runs exactly once after the idle limit (not before it, not again once stopped),
//   with a hostile node name and hostile arguments (`; rm -rf ~`, `$(touch ...)`, backquotes,
//   spaces, quotes, a newline) passed as literal arguments: the script records them verbatim and
//   nothing else runs (no file the hostile text would create appears);
// - the node's idle accrual opens at the first idle tick and closes when autostop stops it: the
//   money is the node's rate × the idle seconds and stays that once stopped; an autostop event and
//   a notice say "stopped by autostop at HH:MM after ... idle";
// - a failing stop command sends the node back to on with an error event naming the command and its
//   exit status, and is tried again only after retry_after_s, not on every tick;
// - a run on the node, or queued work that wants it, keeps it on (no stop, no idle money for a run);
// - a 'stopping' state left by a dead scheduler is settled to on with a warning;
// - a stop command that is not on PATH is an error event, not a crash, and is also retried later;
// - a node removed while its stop command runs: the command is ended, the tick goes on.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "db/costs.h"
#include "db/node_power.h"
#include "db/queries.h"
#include "db/run_store.h"
#include "db/sql.h"
#include "runs/argv_command.h"
#include "runs/autostop.h"
#include "store_fixture.h"

namespace db = flotilla::db;
namespace runs = flotilla::runs;
namespace fs = std::filesystem;
using namespace store_test;

namespace {

// A script that appends its arguments (each followed by NUL) and an end marker to `record`, then
// exits with `status`.
std::string make_script(const fs::path& dir, const std::string& name, const fs::path& record, int status) {
  const fs::path p = dir / name;
  write_bytes(p, "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\0' \"$a\"; done >> '" + record.string() +
                     "'\nprintf 'END\\0' >> '" + record.string() + "'\necho \"stop said: $#\"\nexit " +
                     std::to_string(status) + "\n");
  ::chmod(p.c_str(), 0755);
  return p.string();
}

// The invocations recorded in `record`: each a list of arguments.
std::vector<std::vector<std::string>> invocations(const fs::path& record) {
  std::vector<std::vector<std::string>> out;
  const std::string bytes = read_bytes(record);
  std::vector<std::string> cur;
  size_t start = 0;
  while (start < bytes.size()) {
    const size_t nul = bytes.find('\0', start);
    if (nul == std::string::npos) break;
    const std::string a = bytes.substr(start, nul - start);
    if (a == "END") {
      out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(a);
    }
    start = nul + 1;
  }
  return out;
}

// Ticks at `now` until no stop command of `a` runs for `node` (at most 10 s).
std::vector<runs::AutostopNotice> settle(runs::IdleAutostop& a, db::Database& d, int64_t node, double now,
                                         const runs::WorkView& view = {}) {
  std::vector<runs::AutostopNotice> all;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    auto got = a.tick(d, now, view);
    all.insert(all.end(), got.begin(), got.end());
  } while (a.stopping(node) && std::chrono::steady_clock::now() < until);
  return all;
}

int64_t count_events(const std::string& path, const std::string& level) {
  return raw_int(
      path,
      "SELECT count(*) FROM events WHERE kind = 'autostop' AND run_id IS NULL AND level = '" + level + "'");
}

void test_stop_once_hostile(const fs::path& dir) {
  const std::string path = (dir / "once.db").string();
  db::Database d(path);
  const fs::path record = dir / "once.args";
  const std::string script = make_script(dir, "stop.sh", record, 0);
  const std::string evil_name = "vm; rm -rf ~ $(touch " + (dir / "pwned-name").string() + ")";
  const int64_t id = db::ensure_node(d, evil_name, "ssh");
  db::set_node_pricing(d, id, db::NodePricing{{}, false, 3.6, {}, {}});  // $3.60/h: $0.001 a second
  const std::vector<std::string> args = {script,
                                         "; rm -rf ~",
                                         "$(touch " + (dir / "pwned-subst").string() + ")",
                                         "`touch " + (dir / "pwned-tick").string() + "`",
                                         "two words",
                                         "it's \"quoted\"",
                                         "line\nbreak",
                                         "",
                                         "--zone=us-east1-b"};
  db::NodePower p;
  p.node_id = id;
  p.idle_limit_s = 30;
  p.stop_argv = args;
  db::set_node_power(d, p);

  runs::AutostopOptions o;
  o.log_dir = (dir / "logs").string();
  runs::IdleAutostop a(o);
  const double t0 = 1767225600;
  CHECK(a.tick(d, t0, {}).empty());  // idle from now: the clock starts, the accrual opens
  CHECK(db::node_power(d, id)->idle_since == t0);
  CHECK(db::idle_accruals(d).size() == 1);
  a.tick(d, t0 + 29.9, {});  // not yet
  CHECK(!a.stopping(id) && invocations(record).empty());
  a.tick(d, t0 + 30, {});  // the limit: the command starts
  CHECK(a.stopping(id));
  CHECK(db::node_power(d, id)->state == db::kPowerStopping);
  const auto notices = settle(a, d, id, t0 + 31);
  CHECK(db::node_power(d, id)->state == db::kPowerStopped);
  CHECK_MSG(notices.size() == 1 && notices[0].text.find("stopped by autostop at ") != std::string::npos &&
                notices[0].text.find("after 30 s idle") != std::string::npos && notices[0].node == evil_name,
            "%s", notices.empty() ? "(none)" : notices[0].text.c_str());
  // Stopped: many more ticks, far past the limit, run nothing more.
  for (int i = 0; i < 20; ++i) a.tick(d, t0 + 100 + i * 1000, {});
  const auto calls = invocations(record);
  CHECK_MSG(calls.size() == 1, "%zu invocations", calls.size());
  if (calls.size() == 1) {
    const std::vector<std::string> expected(args.begin() + 1, args.end());
    CHECK(calls[0] == expected);  // verbatim, argument for argument
  }
  for (const char* f : {"pwned-name", "pwned-subst", "pwned-tick"})
    CHECK_MSG(!fs::exists(dir / f), "%s exists: hostile text was run", f);
  CHECK(fs::exists(dir / "logs" / ("node-" + std::to_string(id) + "-stop.log")));
  CHECK(read_bytes(dir / "logs" / ("node-" + std::to_string(id) + "-stop.log")).find("stop said: 8") !=
        std::string::npos);
  // Idle money: 31 s at $3.60/h, closed with autostop's note, and no more once stopped.
  const auto rows = db::idle_accruals(d);
  CHECK(rows.size() == 1 && rows[0].end == t0 + 31 && rows[0].note == "stopped by autostop after 30 s idle");
  CHECK_NEAR(db::idle_cost_usd(d, 0, t0 + 99999), 0.031, 1e-9);
  CHECK(count_events(path, "info") == 1);
}

void test_failed_stop_backs_off(const fs::path& dir) {
  const std::string path = (dir / "fail.db").string();
  db::Database d(path);
  const fs::path record = dir / "fail.args";
  const int64_t id = db::ensure_node(d, "flaky", "ssh");
  db::NodePower p;
  p.node_id = id;
  p.idle_limit_s = 10;
  p.stop_argv = {make_script(dir, "fail.sh", record, 3), "vm-2"};
  db::set_node_power(d, p);
  runs::AutostopOptions o;
  o.retry_after_s = 100;
  runs::IdleAutostop a(o);
  const double t0 = 1767225600;
  a.tick(d, t0, {});
  a.tick(d, t0 + 10, {});
  const auto notices = settle(a, d, id, t0 + 10);
  CHECK(db::node_power(d, id)->state == db::kPowerOn);
  CHECK_MSG(notices.size() == 1 && notices[0].level == "error" &&
                notices[0].text.find("fail.sh vm-2: exit status 3") != std::string::npos &&
                notices[0].text.find("stop said: 1") != std::string::npos,
            "%s", notices.empty() ? "(none)" : notices[0].text.c_str());
  CHECK(count_events(path, "error") == 1);
  // Every tick inside the backoff: nothing runs.
  for (int i = 0; i < 50; ++i) a.tick(d, t0 + 10 + i * 1.9, {});
  CHECK(!a.stopping(id));
  CHECK(invocations(record).size() == 1);
  // After it: one more try.
  a.tick(d, t0 + 110, {});
  CHECK(a.stopping(id));
  settle(a, d, id, t0 + 110);
  CHECK(invocations(record).size() == 2);
  CHECK(count_events(path, "error") == 2);

  // A program that is not on PATH: an error, retried later too.
  p.stop_argv = {"flotilla-no-such-stop-program", "x"};
  db::set_node_power(d, p);
  const auto missing = a.tick(d, t0 + 300, {});
  CHECK(missing.size() == 1 && missing[0].text.find("was not found on PATH") != std::string::npos);
  CHECK(a.tick(d, t0 + 301, {}).empty());
  CHECK(db::node_power(d, id)->state == db::kPowerOn);
}

void test_work_keeps_it_on(const fs::path& dir) {
  const std::string path = (dir / "busy.db").string();
  db::Database d(path);
  const fs::path record = dir / "busy.args";
  const int64_t id = db::ensure_node(d, "worker-a", "ssh");
  db::set_node_pricing(d, id, db::NodePricing{{}, false, 36.0, {}, {}});  // $0.01 a second
  db::NodePower p;
  p.node_id = id;
  p.idle_limit_s = 10;
  p.stop_argv = {make_script(dir, "busy.sh", record, 0)};
  db::set_node_power(d, p);
  runs::IdleAutostop a;
  const double t0 = 1767225600;
  a.tick(d, t0, {});  // idle: accrual opens
  // A run starts there: the accrual closes, no stop however long it runs.
  const int64_t run = make_run(d, "train");
  db::attach_node(d, run, id, 1);
  db::set_status(d, run, db::RunStatus::kRunning, t0 + 5);
  for (int i = 1; i <= 10; ++i) a.tick(d, t0 + 5 + i * 100, {});
  CHECK(!a.stopping(id) && invocations(record).empty());
  CHECK_NEAR(db::idle_cost_usd(d, 0, t0 + 1500), 0.05, 1e-9);  // t0 .. the run's start: 5 s idle
  db::set_status(d, run, db::RunStatus::kCompleted, t0 + 2000);
  // Queued work that wants the node rests its idle clock (it still costs money while it waits).
  runs::WorkView wanted;
  wanted.wanted.insert("worker-a");
  for (int i = 0; i < 10; ++i) a.tick(d, t0 + 2000 + i * 100, wanted);
  CHECK(!a.stopping(id) && invocations(record).empty());
  CHECK(!db::node_power(d, id)->idle_since);
  // The scheduler's own view of a starting entry keeps it busy too.
  runs::WorkView busy;
  busy.busy.insert("worker-a");
  for (int i = 0; i < 5; ++i) a.tick(d, t0 + 3000 + i * 100, busy);
  CHECK(!a.stopping(id) && invocations(record).empty());
  // Work gone: idle clock starts, and after the limit it stops once.
  a.tick(d, t0 + 4000, {});
  a.tick(d, t0 + 4010, {});
  settle(a, d, id, t0 + 4010);
  CHECK(invocations(record).size() == 1);
  CHECK(db::node_power(d, id)->state == db::kPowerStopped);
  // A run started there by hand while it is "stopped": the node is on again, and not stopped under it.
  const int64_t manual = make_run(d, "by-hand");
  db::attach_node(d, manual, id, 1);
  db::set_status(d, manual, db::RunStatus::kRunning, t0 + 5000);
  const auto again = a.tick(d, t0 + 5001, {});
  CHECK(again.size() == 1 && again[0].text.find("is running a run again") != std::string::npos);
  CHECK(db::node_power(d, id)->state == db::kPowerOn);
  for (int i = 0; i < 5; ++i) a.tick(d, t0 + 6000 + i * 100, {});
  CHECK(!a.stopping(id) && invocations(record).size() == 1);
}

void test_stale_stopping(const fs::path& dir) {
  db::Database d((dir / "stale.db").string());
  const int64_t id = db::ensure_node(d, "left", "ssh");
  db::NodePower p;
  p.node_id = id;
  p.idle_limit_s = 10;
  p.stop_argv = {"true"};
  db::set_node_power(d, p);
  db::set_power_state(d, id, db::kPowerStopping, 1000);
  runs::IdleAutostop a;
  const auto n = a.tick(d, 2000, {});
  CHECK(n.size() == 1 && n[0].level == "warning");
  CHECK(db::node_power(d, id)->state == db::kPowerOn);
  db::set_power_state(d, id, db::kPowerStarting, 2001);
  a.tick(d, 2002, {});
  CHECK(db::node_power(d, id)->state == db::kPowerStopped);  // a half-started node is started again
}

// A node removed while its stop command runs: the command is ended, the tick goes on.
void test_removed_while_stopping(const fs::path& dir) {
  db::Database d((dir / "gone.db").string());
  const int64_t id = db::ensure_node(d, "gone", "ssh");
  db::NodePower p;
  p.node_id = id;
  p.idle_limit_s = 1;
  p.stop_argv = {"sleep", "30"};
  db::set_node_power(d, p);
  runs::IdleAutostop a;
  a.tick(d, 100, {});
  a.tick(d, 101, {});
  CHECK(a.stopping(id));
  db::remove_node(d, "gone");
  const auto t = std::chrono::steady_clock::now();
  CHECK(a.tick(d, 102, {}).empty());
  CHECK(!a.stopping(id));
  CHECK(std::chrono::steady_clock::now() - t < std::chrono::seconds(5));
}

void test_command_text_and_timeout(const fs::path& dir) {
  CHECK(runs::command_text({"gcloud", "stop", "vm 1", "a'b", ""}) == "gcloud stop 'vm 1' 'a'\\''b' ''");
  CHECK(runs::command_text({"x", "a\nb"}) == "x 'a\\x0ab'");
  runs::ArgvCommand c;
  std::string why;
  CHECK(c.start({"sleep", "30"}, 0.3, (dir / "sleep.log").string(), &why));
  const auto t = std::chrono::steady_clock::now();
  const runs::CommandOutcome o = c.wait();
  CHECK(o.timed_out && !o.ok && o.description.find("timeout") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t < std::chrono::seconds(5));
  // Output beyond the kept head and tail is left out, and the command is not blocked by it.
  runs::ArgvCommand big;
  CHECK(big.start({"head", "-c", "10000000", "/dev/zero"}, 20, "", &why));
  const runs::CommandOutcome b = big.wait();
  CHECK(b.ok && b.output.size() < 70 * 1024 && b.output.find("bytes left out") != std::string::npos);
  // stdin is /dev/null: a command that reads it ends at once.
  runs::ArgvCommand cat;
  CHECK(cat.start({"cat"}, 5, "", &why));
  CHECK(cat.wait().ok);
}

}  // namespace

int main() {
  const fs::path dir = scratch("autostop", "work");
  test_stop_once_hostile(dir);
  test_failed_stop_backs_off(dir);
  test_work_keeps_it_on(dir);
  test_stale_stopping(dir);
  test_removed_while_stopping(dir);
  test_command_text_and_timeout(dir);
  return flotilla_test::summary("test_autostop");
}
