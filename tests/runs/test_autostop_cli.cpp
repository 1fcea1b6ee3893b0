// `flotilla nodes autostop` through the real binary and a real store: the settings are stored as
// typed (hostile arguments verbatim, a '-' argument through --stop-arg=...), shown by the command and
// by `nodes list` (text and JSON); --off keeps the commands; every argument error is a usage error
// (exit 2) naming its option (--idle, --stop-arg, --start-arg, --off), and nothing is stored then;
// `flotilla costs` lists idle money per node and autostop's rows.
#include <string>
#include <vector>

#include "check.h"
#include "db/database.h"
#include "db/node_power.h"
#include "db/nodes.h"
#include "db/run_store.h"
#include "worker_run.h"

using namespace flotilla_test;
namespace db = flotilla::db;

namespace {

std::string g_root;
int g_calls = 0;

ProcResult cli(const std::vector<std::string>& args) {
  const std::string log = g_root + "/cli" + std::to_string(++g_calls) + ".log";
  std::vector<std::string> argv = {FLOTILLA_CLI_PATH, "--db", g_root + "/store.db"};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcResult r;
  r.exit_code = wait_exit(spawn(argv, {"DISPLAY=", "WAYLAND_DISPLAY=", "QT_QPA_PLATFORM="}, log));
  r.output = read_file(log);
  return r;
}

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

void refused(const std::vector<std::string>& args, const std::string& option, const std::string& words) {
  const ProcResult r = cli(args);
  CHECK_MSG(r.exit_code == 2 && has(r.output, option) && has(r.output, words), "exit %d: %s", r.exit_code,
            r.output.c_str());
}

}  // namespace

int main() {
  g_root = fresh_dir("autostop_cli");
  {
    db::Database d(g_root + "/store.db");
    db::SshNode n;
    n.name = "vm-1";
    n.host = "10.0.0.5";
    db::add_ssh_node(d, n);
  }
  ProcResult r = cli({"nodes", "autostop", "vm-1", "--idle", "30m", "--stop-arg", "gcloud", "--stop-arg",
                      "stop", "--stop-arg", "vm 1; rm -rf ~", "--stop-arg", "$(touch /tmp/pwned)",
                      "--stop-arg=--zone=us-east1-b", "--start-arg", "gcloud", "--start-arg", "start"});
  CHECK_MSG(r.exit_code == 0 && has(r.output, "stopped after 30 min with no work"), "%s", r.output.c_str());
  CHECK(has(r.output, "stop command:  gcloud stop 'vm 1; rm -rf ~' '$(touch /tmp/pwned)' --zone=us-east1-b"));
  {
    db::Database d(g_root + "/store.db");
    const auto p = db::node_power(d, db::get_ssh_node(d, "vm-1").id);
    CHECK(p && p->idle_limit_s == 1800.0);
    CHECK(p && p->stop_argv == std::vector<std::string>({"gcloud", "stop", "vm 1; rm -rf ~",
                                                         "$(touch /tmp/pwned)", "--zone=us-east1-b"}));
    CHECK(p && p->start_argv == std::vector<std::string>({"gcloud", "start"}));
  }
  r = cli({"nodes", "list"});
  CHECK_MSG(has(r.output, "AUTOSTOP") && has(r.output, "30 min (on)"), "%s", r.output.c_str());
  r = cli({"nodes", "list", "--json"});
  CHECK_MSG(has(r.output, "\"idle_limit_s\": 1800.0") && has(r.output, "\"state\": \"on\""), "%s",
            r.output.c_str());
  r = cli({"nodes", "autostop", "vm-1", "--json"});
  CHECK_MSG(r.exit_code == 0 && has(r.output, "\"stop_argv\""), "%s", r.output.c_str());

  // Argument errors name the option; nothing is stored.
  refused({"nodes", "autostop", "vm-1", "--idle", "30"}, "--idle", "needs a duration like 30m");
  refused({"nodes", "autostop", "vm-1", "--idle", "0m"}, "--idle", "more than 0");
  refused({"nodes", "autostop", "vm-1", "--idle", "31d"}, "--idle", "at most 30 days");
  refused({"nodes", "autostop", "vm-1", "--stop-arg", ""}, "--stop-arg", "the program to run) is empty");
  refused({"nodes", "autostop", "vm-1", "--start-arg", "", "--start-arg", "x"}, "--start-arg", "is empty");
  refused({"nodes", "autostop", "vm-1", "--stop-arg", "--zone"}, "--stop-arg", "needs a value");
  refused({"nodes", "autostop", "vm-1", "--off", "--idle", "5m"}, "--off", "takes no other setting");
  refused({"nodes", "autostop", "vm-1", "--no-start-cmd", "--start-arg", "x"}, "--no-start-cmd",
          "--start-arg");
  refused({"nodes", "autostop", "vm-1", "--idel", "5m"}, "--idel", "unknown option");
  {
    db::Database d(g_root + "/store.db");
    db::SshNode n;
    n.name = "bare";
    n.host = "10.0.0.6";
    db::add_ssh_node(d, n);
  }
  refused({"nodes", "autostop", "bare", "--idle", "10m"}, "--stop-arg", "an idle limit needs a command");
  {
    db::Database d(g_root + "/store.db");
    CHECK(!db::node_power(d, db::get_ssh_node(d, "bare").id));
    CHECK(db::node_power(d, db::get_ssh_node(d, "vm-1").id)->idle_limit_s == 1800.0);
  }
  r = cli({"nodes", "autostop", "nope", "--idle", "5m"});
  CHECK(r.exit_code == 4);

  // --off keeps the commands; the limit can come back without retyping them.
  r = cli({"nodes", "autostop", "vm-1", "--off"});
  CHECK(r.exit_code == 0 && has(r.output, "autostop off for node vm-1"));
  r = cli({"nodes", "autostop", "vm-1"});
  CHECK_MSG(has(r.output, "autostop off (its commands are kept)") && has(r.output, "gcloud stop"), "%s",
            r.output.c_str());
  r = cli({"nodes", "list"});
  CHECK(!has(r.output, "30 min (on)"));
  r = cli({"nodes", "autostop", "vm-1", "--idle", "1h30m", "--no-start-cmd"});
  CHECK_MSG(r.exit_code == 0 && has(r.output, "after 1 h 30 min") && has(r.output, "- (start it yourself)"),
            "%s", r.output.c_str());

  // `flotilla costs` shows idle money per node and what autostop did.
  {
    db::Database d(g_root + "/store.db");
    const int64_t id = db::get_ssh_node(d, "vm-1").id;
    db::open_idle_accrual(d, id, 1767225600, 2.0);
    db::close_idle_accrual(d, id, 1767225600 + 1800, "stopped by autostop after 30 min idle");
    db::add_event(d, std::nullopt, 1767225600 + 1800, "autostop", "info",
                  "node vm-1 stopped by autostop at 03:12 after 30 min idle (gcloud stop)",
                  R"({"node":"vm-1","stopped":true,"idle_s":1800})");
  }
  r = cli({"costs"});
  CHECK_MSG(r.exit_code == 0 && has(r.output, "idle (powered, no run) by node") && has(r.output, "$1.00") &&
                has(r.output, "stopped by autostop at 03:12 after 30 min idle") &&
                has(r.output, "idle total $1.00"),
            "%s", r.output.c_str());
  r = cli({"costs", "--json"});
  CHECK_MSG(has(r.output, "\"idle_total_usd\": 1.0") && has(r.output, "\"idle_s\": 1800.0"), "%s",
            r.output.c_str());
  return summary("test_autostop_cli");
}
