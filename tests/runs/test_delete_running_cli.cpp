// `flotilla runs delete RUN --force` of a local run whose worker is alive (issue 33, D14;
// docs/reliability.md), with the real flotilla and flotilla-worker binaries on a priced store:
// - the delete is refused (exit 9) naming the worker's pid and how to stop it; the row, its metrics
//   and its cost stay, the worker trains on and is still recorded; once stopped it can be deleted;
// - a watcher whose row is deleted all the same (by another program: here the store API itself)
//   says so once, stops its worker with a checkpoint and exits 4, with no foreign-key errors.
#include <signal.h>

#include <cstdio>
#include <fstream>

#include "check.h"
#include "db/costs.h"
#include "db/database.h"
#include "db/queries.h"
#include "db/run_store.h"
#include "runs/process.h"
#include "worker_run.h"

using namespace flotilla_test;
namespace db = flotilla::db;
namespace fs = std::filesystem;

namespace {

std::string g_root;
int g_calls = 0;

std::vector<std::string> env() {
  return {"OMP_NUM_THREADS=1",
          "DISPLAY=", "WAYLAND_DISPLAY=", "QT_QPA_PLATFORM=", "FLOTILLA_TEST_STEP_SLEEP_MS=5"};
}

pid_t spawn_cli(const std::vector<std::string>& args, std::string* log) {
  *log = g_root + "/cli" + std::to_string(++g_calls) + ".log";
  std::vector<std::string> argv = {"/bin/sh",         "-c",   "cd \"$0\" && exec \"$@\"", g_root,
                                   FLOTILLA_CLI_PATH, "--db", g_root + "/store.db"};
  argv.insert(argv.end(), args.begin(), args.end());
  return spawn(argv, env(), *log);
}

ProcResult cli(const std::vector<std::string>& args) {
  std::string log;
  ProcResult r;
  r.exit_code = wait_exit(spawn_cli(args, &log));
  r.output = read_file(log);
  return r;
}

std::string config(const std::string& name) {
  const std::string path = g_root + "/" + name + ".toml";
  write_text(path, "[run]\nname = \"" + name +
                       "\"\nthreads = 1\n[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\nn_embd = 32\n"
                       "vocab_size = 128\nmax_seq_len = 32\n[data]\nsynthetic_tokens = 30000\n[train]\n"
                       "steps = 1000000\nmicro_batch = 2\nseq_len = 16\n[checkpoint]\nevery = 1000000\n"
                       "[budget]\nusd_per_hour = 36.0\n");
  return path;
}

int64_t steps_of(const std::string& name) {
  const db::Database d(g_root + "/store.db");
  const auto r = db::find_run(d, name);
  return r ? static_cast<int64_t>(db::metric_points(d, r->id, "loss").size()) : 0;
}

pid_t worker_of(const std::string& run_dir) {
  long pid = 0;
  std::ifstream(run_dir + "/worker.pid") >> pid;
  return static_cast<pid_t>(pid);
}

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = 0; (at = text.find(what, at)) != std::string::npos; at += what.size()) ++n;
  return n;
}

void a_live_worker_is_not_deleted() {
  std::string log;
  const pid_t pid = spawn_cli({"run", config("rd"), "--quiet"}, &log);
  CHECK(wait_until([&] { return steps_of("rd") >= 20; }, 90));
  const db::Run before = db::get_run(db::Database(g_root + "/store.db"), "rd");
  const pid_t worker = worker_of(before.run_dir);
  const ProcResult del = cli({"runs", "delete", "rd", "--force"});
  std::printf("runs delete rd --force while it trains: exit %d\n%s", del.exit_code, del.output.c_str());
  CHECK_MSG(del.exit_code == 9 && has(del.output, "pid " + std::to_string(worker)) &&
                has(del.output, "runs attach rd") && !has(del.output, "deleted run"),
            "exit %d\n%s", del.exit_code, del.output.c_str());
  CHECK(flotilla::runs::process_alive(worker));
  // Nothing was lost: the row, its metrics and its cost go on.
  const int64_t steps = steps_of("rd");
  CHECK(wait_until([&] { return steps_of("rd") > steps + 20; }, 60));
  {
    const db::Database d(g_root + "/store.db");
    const db::Run r = db::get_run(d, "rd");
    CHECK(r.status == db::RunStatus::kRunning);
    CHECK(db::run_cost_usd(d, r.id) > 0);
  }
  ::kill(pid, SIGINT);  // stopped by the command that watches it
  CHECK(wait_exit(pid) == 10);
  const std::string out = read_file(log);
  CHECK_MSG(!has(out, "FOREIGN KEY"), "%s", out.c_str());
  CHECK(db::get_run(db::Database(g_root + "/store.db"), "rd").status == db::RunStatus::kStopped);
  // Stopped, it can be deleted.
  const ProcResult again = cli({"runs", "delete", "rd"});
  CHECK_MSG(again.exit_code == 0 && has(again.output, "deleted run rd"), "%s", again.output.c_str());
}

void a_watcher_whose_row_vanishes_ends_cleanly() {
  std::string log;
  const pid_t pid = spawn_cli({"run", config("gone")}, &log);
  CHECK(wait_until([&] { return steps_of("gone") >= 20; }, 90));
  std::string run_dir;
  {
    db::Database d(g_root + "/store.db");
    const db::Run r = db::get_run(d, "gone");
    run_dir = r.run_dir;
    db::delete_run(d, r.id);  // as an older Flotilla's --force did
  }
  const pid_t worker = worker_of(run_dir);
  int status = 0;
  CHECK(wait_until([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, 60));
  CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 4, "status %d", status);
  const std::string out = read_file(log);
  std::printf("the watcher of a deleted run:\n%s", out.substr(out.find("flotilla:")).c_str());
  CHECK_MSG(count(out, "was deleted from the run database") == 1 && !has(out, "FOREIGN KEY") &&
                !has(out, "SQLite code"),
            "%s", out.c_str());
  CHECK(wait_until([&] { return !flotilla::runs::process_alive(worker); }, 30));  // the worker was stopped
  bool checkpointed = false;
  for (const auto& r : read_metrics(run_dir)) checkpointed |= r["type"] == "checkpoint";
  CHECK(checkpointed);  // with a checkpoint: its folder keeps the work
  CHECK(!db::find_run(db::Database(g_root + "/store.db"), "gone"));
}

}  // namespace

int main() {
  g_root = fresh_dir("runs_delete_running");
  a_live_worker_is_not_deleted();
  a_watcher_whose_row_vanishes_ends_cleanly();
  return summary("test_delete_running_cli");
}
