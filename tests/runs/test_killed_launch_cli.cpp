// Audit 2, D5: kill -9 of `flotilla-worker launch` (the pid in the run folder's worker.pid) under
// `flotilla run` of a 2-rank run. Its ranks had no parent-death signal and kept training
// unsupervised, and `flotilla runs resume` started a second group in the same folder while they
// still wrote there. With the real flotilla and flotilla-worker binaries:
// - the ranks get SIGTERM when launch dies: they stop at their next step, with a checkpoint, within
//   seconds, and the run resumes from that checkpoint to the end;
// - while a rank of the killed group is still alive (SIGSTOPped here, so it cannot stop yet), the
//   folder is in use: `runs resume` is refused naming its pid, and accepted once it has ended.
#include <signal.h>
#include <unistd.h>

#include <fstream>

#include "check.h"
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
  // A pause after each step: the run cannot end before the kill it is waiting for.
  return {"OMP_NUM_THREADS=1",
          "DISPLAY=", "WAYLAND_DISPLAY=", "QT_QPA_PLATFORM=", "FLOTILLA_TEST_STEP_SLEEP_MS=50"};
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
  write_text(path,
             "[run]\nname = \"" + name +
                 "\"\nthreads = 1\n[model]\npreset = \"custom\"\nn_layer = 2\n"
                 "n_head = 2\nn_embd = 32\nvocab_size = 128\nmax_seq_len = 32\n[data]\nsynthetic_tokens = "
                 "30000\n[train]\nsteps = 300\nmicro_batch = 2\nseq_len = 16\n[parallel]\ndp = 2\n"
                 "[checkpoint]\nevery = 1000\n");
  return path;
}

db::Run run_named(const std::string& name) { return db::get_run(db::Database(g_root + "/store.db"), name); }

int64_t steps_of(const std::string& name) {
  const db::Database d(g_root + "/store.db");
  const auto r = db::find_run(d, name);
  return r ? static_cast<int64_t>(db::metric_points(d, r->id, "loss").size()) : 0;
}

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

// Starts `flotilla run` of a 2-rank run, waits for step 5; returns the CLI, launch and rank pids.
struct Group {
  pid_t cli = -1, launch = -1;
  std::vector<pid_t> ranks;
  std::string run_dir, log;
};

Group start(const std::string& name) {
  Group g;
  g.cli = spawn_cli({"run", config(name), "--name", name}, &g.log);
  CHECK(wait_until([&] { return steps_of(name) >= 5; }, 120));
  g.run_dir = run_named(name).run_dir;
  long pid = 0;
  std::ifstream(g.run_dir + "/worker.pid") >> pid;
  g.launch = static_cast<pid_t>(pid);
  g.ranks = flotilla::runs::child_pids(g.launch);
  CHECK_MSG(g.launch > 0 && g.ranks.size() == 2, "launch %d with %zu rank(s)", static_cast<int>(g.launch),
            g.ranks.size());
  return g;
}

bool all_gone(const std::vector<pid_t>& pids) {
  for (pid_t p : pids)
    if (flotilla::runs::process_alive(p)) return false;
  return true;
}

void killed_launch_takes_its_ranks_down() {
  Group g = start("orph");
  ::kill(g.launch, SIGKILL);
  // Parent-death signal: SIGTERM, the preemption path (a checkpoint at the next step, exit 10).
  // Orphaned, they would train on for ~15 s.
  CHECK_MSG(wait_until([&] { return all_gone(g.ranks); }, 8), "the ranks outlived their supervisor by 8 s");
  wait_exit(g.cli);
  bool preempt_checkpoint = false;
  for (const auto& r : read_metrics(g.run_dir))
    preempt_checkpoint |= r["type"] == "checkpoint" && r["reason"] == "preempted";
  CHECK(preempt_checkpoint);
  const ProcResult resumed = cli({"runs", "resume", "orph", "--quiet"});
  CHECK_MSG(resumed.exit_code == 0, "exit %d\n%s", resumed.exit_code, resumed.output.c_str());
  CHECK(run_named("orph").status == db::RunStatus::kCompleted);
}

void resume_is_refused_while_a_rank_lives() {
  Group g = start("held");
  // Stopped right after launch has died (within the rank's 50 ms step), so it cannot act on its
  // SIGTERM until continued. Not before: the kernel continues the stopped members of a process
  // group that its parent's death orphans (with SIGHUP, which the rank takes as a stop).
  ::kill(g.launch, SIGKILL);
  for (int i = 0; i < 20000 && flotilla::runs::process_alive(g.launch); ++i) ::usleep(100);
  ::kill(g.ranks[1], SIGSTOP);
  wait_exit(g.cli);
  CHECK(flotilla::runs::process_alive(g.ranks[1]));
  const ProcResult refused = cli({"runs", "resume", "held"});
  CHECK_MSG(refused.exit_code == 9 && has(refused.output, "run held still has live processes") &&
                has(refused.output, std::to_string(g.ranks[1])),
            "exit %d (rank pids %d, %d)\n%s", refused.exit_code, static_cast<int>(g.ranks[0]),
            static_cast<int>(g.ranks[1]), refused.output.c_str());
  CHECK(flotilla::runs::live_worker_pid(g.run_dir) == 0);  // nothing new was started
  ::kill(g.ranks[1], SIGCONT);
  CHECK_MSG(wait_until([&] { return all_gone(g.ranks); }, 30), "the ranks did not end after SIGCONT");
  const ProcResult resumed = cli({"runs", "resume", "held", "--quiet"});
  CHECK_MSG(resumed.exit_code == 0, "exit %d\n%s", resumed.exit_code, resumed.output.c_str());
  CHECK(run_named("held").status == db::RunStatus::kCompleted);
}

}  // namespace

int main() {
  g_root = fresh_dir("runs_killed_launch");
  killed_launch_takes_its_ranks_down();
  resume_is_refused_while_a_rank_lives();
  return summary("test_killed_launch_cli");
}
