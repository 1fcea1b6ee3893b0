// `flotilla queue` as a user drives it (the real flotilla and flotilla-worker binaries, CPU ranks):
// - three tiny runs queued with priorities and an --after: `queue serve --until-empty` starts the
//   higher priority first, the --after one only once its run completed, each exactly once, and
//   returns 0 with every entry done;
// - an invalid config is refused naming the field, nothing queued; a bad --deadline or --on is a
//   usage error;
// - an entry no place can take does not keep `serve --until-empty` waiting;
// - a second `queue serve` on the same workspace is refused (exit 9) naming the first's pid and
//   host; SIGTERM ends the first cleanly (exit 0), releasing the queue and leaving its run
//   running; the next serve attaches it and sees it to its end.
#include <signal.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "check.h"
#include "db/database.h"
#include "db/queries.h"
#include "db/queue.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "worker_run.h"

using namespace flotilla_test;
namespace db = flotilla::db;
namespace fs = std::filesystem;

namespace {

std::string g_root;
int g_calls = 0;

std::vector<std::string> env() {
  return {"OMP_NUM_THREADS=1", "DISPLAY=", "WAYLAND_DISPLAY=", "QT_QPA_PLATFORM="};
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

std::string tiny(const std::string& name, int steps) {
  return "[run]\nname = \"" + name +
         "\"\nthreads = 1\n[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\nn_embd = 32\nvocab_size = "
         "128\nmax_seq_len = 32\n[data]\nsynthetic_tokens = 30000\n[train]\nsteps = " +
         std::to_string(steps) + "\nmicro_batch = 2\nseq_len = 16\n[checkpoint]\nevery = 20\n";
}

void runs_in_order_each_once() {
  write_text(g_root + "/a.toml", tiny("qa", 60));
  write_text(g_root + "/b.toml", tiny("qb", 60));
  write_text(g_root + "/c.toml", tiny("qc", 30));
  ProcResult r = cli({"queue", "add", "a.toml"});
  CHECK_MSG(r.exit_code == 0 && r.output.find("queued qa as entry 1") != std::string::npos, "%s",
            r.output.c_str());
  r = cli({"queue", "add", "b.toml", "--priority", "5", "--deadline", "+3h", "--on", "local"});
  CHECK_MSG(r.exit_code == 0, "%s", r.output.c_str());
  r = cli({"queue", "add", "c.toml", "--after", "qb", "--set", "train.steps=40"});
  CHECK_MSG(r.exit_code == 0, "%s", r.output.c_str());
  r = cli({"queue", "list"});
  CHECK_MSG(r.exit_code == 0 && r.output.find("qb") < r.output.find("qa") &&
                r.output.find("qa") < r.output.find("qc"),
            "%s", r.output.c_str());

  r = cli({"queue", "serve", "--until-empty", "--tick", "0.3"});
  CHECK_MSG(r.exit_code == 0, "serve exit %d: %s", r.exit_code, r.output.c_str());
  CHECK_MSG(r.output.find("started qb") != std::string::npos, "%s", r.output.c_str());

  const db::Database d(g_root + "/store.db");
  const db::Run a = db::get_run(d, "qa"), b = db::get_run(d, "qb"), c = db::get_run(d, "qc");
  for (const db::Run* run : {&a, &b, &c}) {
    CHECK_MSG(run->status == db::RunStatus::kCompleted, "%s: %s", run->name.c_str(),
              db::to_string(run->status));
    int starts = 0, scheduled = 0;
    for (const db::EventInfo& ev : db::list_events(d, run->id)) {
      if (ev.kind == "status" && ev.message.find("worker pid") != std::string::npos) ++starts;
      if (ev.kind == "scheduled") ++scheduled;
    }
    CHECK_MSG(starts == 1 && scheduled == 1, "%s: %d worker starts, %d decisions", run->name.c_str(), starts,
              scheduled);
  }
  CHECK(db::metric_points(d, c.id, "loss").size() == 40);  // the --set reached the queued config
  // The priority first; the --after one only once qb completed.
  CHECK(b.started_at && a.started_at && *b.started_at <= *a.started_at);
  CHECK_MSG(c.started_at && b.ended_at && *c.started_at >= *b.ended_at, "qc started before qb ended");
  for (const auto& e : db::list_queue(d, true))
    CHECK_MSG(e.state == db::EntryState::kDone && e.starts == 1, "entry %s: %s (%lld starts)", e.name.c_str(),
              db::entry_state_name(e.state), static_cast<long long>(e.starts));
  r = cli({"queue", "list", "--all", "--json"});
  const auto j = nlohmann::json::parse(r.output, nullptr, false);
  CHECK_MSG(j.is_array() && j.size() == 3 && j[0].value("state", "") == "done", "%s", r.output.c_str());
  r = cli({"queue", "show", "qb"});
  CHECK_MSG(r.exit_code == 0 && r.output.find("done") != std::string::npos, "%s", r.output.c_str());
}

void refusals() {
  write_text(g_root + "/bad.toml", tiny("qbad", 10) + "[optim]\nlr = -1\n");
  ProcResult r = cli({"queue", "add", "bad.toml"});
  CHECK_MSG(r.exit_code == 3 && r.output.find("lr") != std::string::npos, "exit %d: %s", r.exit_code,
            r.output.c_str());
  r = cli({"queue", "add", "a.toml", "--deadline", "tomorrow"});
  CHECK_MSG(r.exit_code == 2 && r.output.find("--deadline") != std::string::npos, "%s", r.output.c_str());
  r = cli({"queue", "add", "a.toml", "--on", "node:$(rm -rf x)"});
  CHECK_MSG(r.exit_code == 2, "exit %d: %s", r.exit_code, r.output.c_str());
  const db::Database d(g_root + "/store.db");
  CHECK(db::list_queue(d, false).empty());
}

// An entry no place can take (--on a node the workspace does not have) does not keep
// `serve --until-empty` waiting: it returns, the entry stays queued with why.
void unplaceable_entry_does_not_hang() {
  ProcResult r = cli({"queue", "add", "a.toml", "--name", "qghost", "--on", "node:ghost"});
  CHECK_MSG(r.exit_code == 0, "%s", r.output.c_str());
  r = cli({"queue", "serve", "--until-empty", "--tick", "0.3"});
  CHECK_MSG(r.exit_code == 0 && r.output.find("1 queued entry cannot start") != std::string::npos,
            "exit %d: %s", r.exit_code, r.output.c_str());
  const db::Database d(g_root + "/store.db");
  const db::QueueEntry e = db::get_queue_entry(d, "qghost");
  CHECK_MSG(e.state == db::EntryState::kQueued && !e.why.empty() && !db::find_run(d, "qghost"), "%s: %s",
            db::entry_state_name(e.state), e.why.c_str());
  r = cli({"queue", "cancel", "qghost"});
  CHECK_MSG(r.exit_code == 0 && r.output.find("cancelled") != std::string::npos, "%s", r.output.c_str());
}

// A second `queue serve` is refused naming the first; SIGTERM ends the first cleanly, releasing
// the queue and leaving its run running; the next serve attaches the run and sees it to its end,
// its worker started once.
void second_serve_is_refused() {
  write_text(g_root + "/long.toml", tiny("qlong", 4000));
  ProcResult r = cli({"queue", "add", "long.toml"});
  CHECK_MSG(r.exit_code == 0, "%s", r.output.c_str());
  std::string log;
  const pid_t first = spawn_cli({"queue", "serve", "--tick", "0.3"}, &log);
  CHECK(wait_until([&] { return read_file(log).find("serving the queue") != std::string::npos; }, 30));
  r = cli({"queue", "serve"});
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  CHECK_MSG(
      r.exit_code == 9 && r.output.find("(pid " + std::to_string(first) + " on " + host) != std::string::npos,
      "exit %d: %s", r.exit_code, r.output.c_str());
  const auto steps = [&] {
    const db::Database d(g_root + "/store.db");
    const auto run = db::find_run(d, "qlong");
    return run ? db::metric_points(d, run->id, "loss").size() : size_t{0};
  };
  CHECK(wait_until([&] { return steps() >= 20; }, 60));
  kill(first, SIGTERM);
  CHECK(wait_exit(first) == 0);
  {
    const db::Database d(g_root + "/store.db");
    CHECK(!db::scheduler_lease(d));  // released
    const db::Run run = db::get_run(d, "qlong");
    CHECK_MSG(run.status == db::RunStatus::kRunning, "%s", db::to_string(run.status));  // left running
    CHECK(db::get_queue_entry(d, "qlong").state == db::EntryState::kRunning);
  }
  r = cli({"queue", "serve", "--until-empty", "--tick", "0.3"});
  CHECK_MSG(r.exit_code == 0 && r.output.find("watching run qlong again") != std::string::npos, "exit %d: %s",
            r.exit_code, r.output.c_str());
  const db::Database d(g_root + "/store.db");
  const db::Run run = db::get_run(d, "qlong");
  CHECK_MSG(run.status == db::RunStatus::kCompleted, "%s", db::to_string(run.status));
  CHECK(db::get_queue_entry(d, "qlong").state == db::EntryState::kDone);
  int starts = 0;
  for (const db::EventInfo& ev : db::list_events(d, run.id))
    if (ev.kind == "status" && ev.message.find("worker pid") != std::string::npos) ++starts;
  CHECK(starts == 1);
  CHECK(db::metric_points(d, run.id, "loss").size() == 4000);
}

}  // namespace

int main() {
  g_root = fresh_dir("scheduler_queue_cli");
  runs_in_order_each_once();
  refusals();
  unplaceable_entry_does_not_hang();
  second_serve_is_refused();
  return summary("test_scheduler_queue_cli");
}
