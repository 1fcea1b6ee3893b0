// `flotilla run` and `flotilla runs` over the runs layer, as a user drives them (the real flotilla
// and flotilla-worker binaries, no display), for the lifecycle faults of issue 16:
// - the terminal closes (SIGHUP): the run stops with a checkpoint and is recorded stopped;
// - `flotilla run` is killed outright: its worker stops with a checkpoint (parent-death signal,
//   no SIGPIPE), the next command settles the stale `running` row from the run's files, and
//   `runs resume` continues it to the end;
// - a run that really is running is not resumed twice;
// - an invalid config starts nothing and stores nothing;
// - Ctrl-C of a 2-rank run stops it without printing a rank error;
// - budgets from the config stop the run (max_usd, max_hours) with the reason shown; a --budget
//   on an unpriced machine is refused with the fix named;
// - `runs checkpoints` lists only what is still on disk;
// - --max-restarts reaches the worker's command line; `runs checkpoint` reaches a CLI run's worker;
// - a run from a Hugging Face folder (model.init_from) validates, trains and is stored as the model
//   the folder describes, and writes its folder back at the end.
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "check.h"
#include "db/database.h"
#include "db/queries.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "runs/process.h"
#include "runs/run_speed.h"
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

// `flotilla --db DB args...` in g_root, in the background; its output in *log.
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

std::string config(const std::string& name, int64_t steps, const std::string& extra = "",
                   int every = 1000000) {
  const std::string path = g_root + "/" + name + ".toml";
  write_text(
      path,
      "[run]\nname = \"" + name +
          "\"\nthreads = 1\n[model]\npreset = \"custom\"\nn_layer = 2\n"
          "n_head = 2\nn_embd = 32\nvocab_size = 128\nmax_seq_len = 32\n[data]\nsynthetic_tokens = 30000\n"
          "[train]\nsteps = " +
          std::to_string(steps) +
          "\nmicro_batch = 2\nseq_len = 16\n[checkpoint]\n"
          "every = " +
          std::to_string(every) + "\n" + extra);
  return path;
}

db::Run run_named(const std::string& name) {
  const db::Database d(g_root + "/store.db");
  return db::get_run(d, name);
}

int64_t steps_of(const std::string& name) {
  const db::Database d(g_root + "/store.db");
  const auto r = db::find_run(d, name);
  return r ? static_cast<int64_t>(db::metric_points(d, r->id, "loss").size()) : 0;
}

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

void a_closed_terminal_stops_the_run(const std::string& cfg) {
  std::string log;
  const pid_t pid = spawn_cli({"run", cfg, "--name", "hangup"}, &log);
  CHECK(wait_until([&] { return steps_of("hangup") >= 10; }, 60));
  ::kill(pid, SIGHUP);
  const int code = wait_exit(pid);
  CHECK_MSG(code == 10, "exit %d\n%s", code, read_file(log).c_str());
  const db::Run r = run_named("hangup");
  CHECK(r.status == db::RunStatus::kStopped);
  const auto cps = db::list_checkpoints(db::Database(g_root + "/store.db"), r.id);
  CHECK(!cps.empty() && cps.back().reason == "stop");
}

void a_killed_command_is_settled_and_resumed(const std::string& cfg) {
  std::string log;
  const pid_t pid = spawn_cli({"run", cfg, "--name", "orphan"}, &log);
  CHECK(wait_until([&] { return steps_of("orphan") >= 10; }, 60));
  const std::string run_dir = run_named("orphan").run_dir;
  ::kill(pid, SIGKILL);
  wait_exit(pid);
  // The worker got SIGTERM from its parent-death signal: it checkpoints and exits, never SIGPIPE.
  CHECK(wait_until(
      [&] {
        std::ifstream f(run_dir + "/metrics.jsonl");
        std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        return has(all, "\"type\":\"summary\"");
      },
      60));
  bool preempt_checkpoint = false;
  for (const auto& r : read_metrics(run_dir))
    preempt_checkpoint |= r["type"] == "checkpoint" && r["reason"] == "preempted";
  CHECK(preempt_checkpoint);
  CHECK(run_named("orphan").status == db::RunStatus::kRunning);  // nobody recorded the end yet
  long worker = 0;
  std::ifstream(run_dir + "/worker.pid") >> worker;
  CHECK(worker > 0);
  CHECK(wait_until([&] { return !flotilla::runs::process_alive(static_cast<pid_t>(worker)); },
                   30));  // it is gone
  // Any command settles it from its files.
  const ProcResult list = cli({"runs", "list"});
  CHECK_MSG(has(list.output, "run orphan had no live worker left"), "%s", list.output.c_str());
  const db::Run settled = run_named("orphan");
  CHECK_MSG(settled.status == db::RunStatus::kPreempted, "%s (%s)", db::to_string(settled.status),
            settled.status_note.c_str());
  // ... and it can be continued: it is no longer "running already".
  const ProcResult resumed = cli({"runs", "resume", "orphan", "--quiet"});
  CHECK_MSG(resumed.exit_code == 0, "exit %d\n%s", resumed.exit_code, resumed.output.c_str());
  CHECK(run_named("orphan").status == db::RunStatus::kCompleted);
  CHECK(steps_of("orphan") == 20000);
}

void a_running_run_is_not_resumed_twice(const std::string& cfg) {
  std::string log;
  const pid_t pid = spawn_cli({"run", cfg, "--name", "busy"}, &log);
  CHECK(wait_until([&] { return steps_of("busy") >= 5; }, 60));
  const ProcResult again = cli({"runs", "resume", "busy"});
  CHECK(again.exit_code == 9);
  CHECK_MSG(has(again.output, "is running (its worker, pid"), "%s", again.output.c_str());
  ::kill(pid, SIGINT);
  CHECK(wait_exit(pid) == 10);
}

void an_invalid_config_starts_nothing() {
  const std::string bad = config("bad", 10, "[parallel]\ntp = 3\n");
  const ProcResult r = cli({"run", bad});
  CHECK(r.exit_code == 3);
  CHECK_MSG(has(r.output, "tp"), "%s", r.output.c_str());
  CHECK(!db::find_run(db::Database(g_root + "/store.db"), "bad"));
  CHECK(!fs::exists(g_root + "/runs/bad"));
}

void ctrl_c_of_two_ranks_prints_no_rank_error() {
  const std::string cfg = config("two", 1000000, "[parallel]\ndp = 2\n");
  std::string log;
  const pid_t pid = spawn_cli({"run", cfg}, &log);
  CHECK(wait_until([&] { return steps_of("two") >= 5; }, 90));
  ::kill(pid, SIGINT);
  CHECK(wait_exit(pid) == 10);
  const std::string out = read_file(log);
  CHECK_MSG(!has(out, "exited with code 10"), "%s", out.c_str());
  CHECK_MSG(has(out, "run two stopped (on request)"), "%s", out.c_str());
  CHECK(run_named("two").status == db::RunStatus::kStopped);
}

void budgets_from_the_config_stop_the_run() {
  const std::string usd = config("capped", 1000000, "[budget]\nusd_per_hour = 36.0\nmax_usd = 0.02\n");
  ProcResult r = cli({"run", usd});
  CHECK(r.exit_code == 10);
  CHECK_MSG(has(r.output, "run capped stopped (budget reached: $0.02"), "%s", r.output.c_str());
  const ProcResult show = cli({"runs", "show", "capped"});
  CHECK_MSG(has(show.output, "status     stopped (budget reached: $0.02") &&
                has(show.output, "budget $0.0200") && has(show.output, "price      $36.00/h"),  // runs/figures.h
            "%s", show.output.c_str());
  std::printf("flotilla run (max_usd 0.02 at $36/h): %s",
              show.output.substr(0, show.output.find("created")).c_str());
  const std::string hours = config("timed", 1000000, "[budget]\nmax_hours = 0.0005\n");
  r = cli({"run", hours});
  CHECK(r.exit_code == 10);
  CHECK_MSG(has(r.output, "run timed stopped (time limit reached: "), "%s", r.output.c_str());
  const std::string unpriced = config("unpriced", 10);
  r = cli({"run", unpriced, "--budget", "5"});
  CHECK(r.exit_code == 9);
  CHECK_MSG(
      has(r.output, "flotilla pricing node local --usd-per-hour") && has(r.output, "could never be reached"),
      "%s", r.output.c_str());
  CHECK(!db::find_run(db::Database(g_root + "/store.db"), "unpriced"));
}

void purged_checkpoints_are_not_listed() {
  const std::string cfg = config("purged", 50, "keep_last = 2\n", 10);
  CHECK(cli({"run", cfg, "--quiet"}).exit_code == 0);
  const ProcResult r = cli({"runs", "checkpoints", "purged"});
  CHECK(r.exit_code == 0);
  int listed = 0;
  for (size_t at = 0; (at = r.output.find("step ", at)) != std::string::npos; ++at) ++listed;
  CHECK_MSG(listed == 2, "%d listed:\n%s", listed, r.output.c_str());
  CHECK(db::list_checkpoints(db::Database(g_root + "/store.db"), run_named("purged").id).size() == 5);
}

void restarts_and_checkpoint_requests_reach_the_worker(const std::string& cfg) {
  std::string log;
  const pid_t pid = spawn_cli({"run", cfg, "--name", "asked", "--max-restarts", "0"}, &log);
  CHECK(wait_until([&] { return steps_of("asked") >= 5; }, 60));
  const ProcResult ck = cli({"runs", "checkpoint", "asked"});
  CHECK_MSG(ck.exit_code == 0, "%s", ck.output.c_str());
  CHECK(wait_until(
      [&] {
        for (const auto& c : db::list_checkpoints(db::Database(g_root + "/store.db"), run_named("asked").id))
          if (c.reason == "request") return true;
        return false;
      },
      30));
  ::kill(pid, SIGTERM);
  CHECK(wait_exit(pid) == 10);
  bool restarts = false;
  for (const auto& e : db::list_events(db::Database(g_root + "/store.db"), run_named("asked").id))
    restarts |= has(e.message, "--max-restarts 0");
  CHECK(restarts);
}

void a_hugging_face_folder_runs_from_the_cli() {
  const std::string folder = g_root + "/qwen2";
  fs::copy(std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/hf/qwen2", folder);
  fs::remove(folder + "/reference.safetensors");
  const std::string path = g_root + "/hf.toml";
  write_text(path,
             "[run]\nname = \"hf\"\nthreads = 1\n[model]\ninit_from = \"" + folder +
                 "\"\n[data]\nsynthetic_tokens = 30000\n[train]\nsteps = 3\nmicro_batch = 2\nseq_len = 16\n"
                 "[checkpoint]\nexport_hf = \"hf-out\"\n");
  const ProcResult r = cli({"run", path, "--quiet"});
  CHECK_MSG(r.exit_code == 0, "%s", r.output.c_str());
  const db::Run run = run_named("hf");
  CHECK_MSG(run.status == db::RunStatus::kCompleted, "%s", db::to_string(run.status));
  CHECK_MSG(has(run.config_toml, "arch = \"llama\"") && has(run.config_toml, "n_kv_head = 2") &&
                has(run.config_toml, "qkv_bias = true"),
            "stored config:\n%s", run.config_toml.c_str());
  CHECK(steps_of("hf") == 3);
  // A relative path means what it meant where `flotilla run` was started (SpawnOptions::working_dir).
  CHECK(fs::exists(g_root + "/hf-out/model.safetensors") && fs::exists(g_root + "/hf-out/config.json"));
}

}  // namespace

// One speed per run: runs show and compare print the run's figure (the worker's summary rule,
// runs::run_speed), the one the Runs table and Live show, not a plain mean of every stored step.
// "orphan" was killed and resumed, so the two differ (the summary covers the resumed worker).
void one_speed_per_run_in_show_and_compare() {
  const db::Database db(g_root + "/store.db");
  const flotilla::runs::RunSpeed speed = flotilla::runs::run_speed(db, run_named("orphan"));
  CHECK(speed.from_summary && speed.tokens_per_s > 0);
  const ProcResult show = cli({"runs", "show", "orphan", "--json"});
  CHECK(show.exit_code == 0);
  const auto j = nlohmann::json::parse(show.output, nullptr, false);
  CHECK_MSG(!j.is_discarded() && j["summary"]["tokens_per_s"].is_number(), "%s", show.output.c_str());
  if (!j.is_discarded() && j["summary"]["tokens_per_s"].is_number()) {
    const double shown = j["summary"]["tokens_per_s"].get<double>();
    CHECK_MSG(std::fabs(shown - speed.tokens_per_s) <= 1e-9 * speed.tokens_per_s, "show %.6f, run %.6f",
              shown, speed.tokens_per_s);
    // null where the run's MFU is not known (0: no ceiling, or one the run beat: issue 33 D20)
    if (speed.mfu > 0)
      CHECK(j["summary"]["mfu"].is_number() &&
            std::fabs(j["summary"]["mfu"].get<double>() - speed.mfu) <= 1e-12);
    else
      CHECK(j["summary"]["mfu"].is_null());
  }
  const ProcResult cmp = cli({"compare", "orphan", "hf", "--json"});
  CHECK(cmp.exit_code == 0);
  const auto c = nlohmann::json::parse(cmp.output, nullptr, false);
  // compare --json gives numbers (null where there is none), the same figure as runs show.
  CHECK_MSG(!c.is_discarded() && c["runs"][0]["tokens_per_s"].is_number() &&
                std::fabs(c["runs"][0]["tokens_per_s"].get<double>() - speed.tokens_per_s) <=
                    1e-9 * speed.tokens_per_s,
            "%s (want %.6f)", cmp.output.c_str(), speed.tokens_per_s);
}

int main() {
  g_root = fresh_dir("runs_cli");
  const std::string cfg = config("cli", 20000);
  a_closed_terminal_stops_the_run(config("long", 1000000));
  a_killed_command_is_settled_and_resumed(cfg);
  a_running_run_is_not_resumed_twice(config("busy", 1000000));
  an_invalid_config_starts_nothing();
  ctrl_c_of_two_ranks_prints_no_rank_error();
  budgets_from_the_config_stop_the_run();
  purged_checkpoints_are_not_listed();
  restarts_and_checkpoint_requests_reach_the_worker(config("asked", 1000000));
  a_hugging_face_folder_runs_from_the_cli();
  one_speed_per_run_in_show_and_compare();
  return summary("test_run_cli");
}
