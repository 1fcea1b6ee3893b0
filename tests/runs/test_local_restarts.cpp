// Crash restarts are a run setting (issue 16): run.max_restarts (default 2) reaches launch for
// every local run, so kill -9 of one rank of a 2-rank run restarts every rank from the last
// verified checkpoint, and the run completes with per-step losses bitwise equal to a run that was
// never interrupted (docs/reliability.md C1). With run.max_restarts = 0 the same crash fails the run.
#include <signal.h>

#include "runs/process.h"
#include "runs_fixture.h"

using namespace runs_test;
namespace db = flotilla::db;
namespace runs = flotilla::runs;

namespace {

const std::string kTwoRanks = "[parallel]\ndp = 2\n";

std::vector<double> losses(const std::string& path, int64_t id) {
  const db::Database d(path);
  std::vector<double> out;
  for (const db::Point& p : db::metric_points(d, id, "loss")) out.push_back(p.value);
  return out;
}

// Starts `name`; once `kill_after` steps are stored (0: never), SIGKILLs rank 1.
db::Run run(db::Writer& writer, const std::string& dir, const std::string& name, int64_t kill_after,
            int max_restarts = 2) {
  std::string toml = tiny_config(120, kTwoRanks, 20);
  toml.replace(toml.find("threads = 1\n"), 12,
               "threads = 1\nmax_restarts = " + std::to_string(max_restarts) + "\n");
  Started s = create_and_start(writer, dir, toml, name);
  Watcher w(&writer, s.watch);
  if (kill_after > 0) {
    CHECK(wait_until([&] { return steps_stored(writer.path(), s.run.run_id) >= kill_after; }, 120));
    const std::vector<pid_t> ranks = runs::child_pids(s.watch.pid);
    CHECK(ranks.size() == 2);
    if (ranks.size() == 2) ::kill(ranks[1], SIGKILL);
  }
  CHECK(w.wait(240));
  return stored(writer.path(), s.run.run_id);
}

}  // namespace

int main() {
  const std::string dir = scratch("restarts");
  db::Writer writer(dir + "/store.db");
  const db::Run clean = run(writer, dir, "uninterrupted", 0);
  CHECK(clean.status == db::RunStatus::kCompleted);
  const db::Run crashed = run(writer, dir, "crashed", 50);
  CHECK_MSG(crashed.status == db::RunStatus::kCompleted, "%s (%s)", db::to_string(crashed.status),
            crashed.status_note.c_str());
  const std::vector<double> a = losses(writer.path(), clean.id), b = losses(writer.path(), crashed.id);
  CHECK(a.size() == 120 && b.size() == 120);
  int differ = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) differ += a[i] != b[i];  // bitwise, not allclose
  CHECK_MSG(differ == 0, "%d of 120 losses differ after the restart", differ);
  bool restarted = false;
  for (const db::EventInfo& e : db::list_events(db::Database(writer.path()), crashed.id))
    restarted |= e.kind == "launch" && e.message.find("rank 1") != std::string::npos;
  CHECK(restarted);  // launch's root cause of the crash is recorded with the run
  std::printf("kill -9 of rank 1 at step >= 50: restarted from the checkpoint, %d of 120 losses differ\n",
              differ);

  // No restarts allowed: the same crash fails the run, naming the rank.
  const db::Run failed = run(writer, dir, "no-restarts", 50, 0);
  CHECK_MSG(failed.status == db::RunStatus::kFailed && failed.status_note.find("rank 1") != std::string::npos,
            "%s (%s)", db::to_string(failed.status), failed.status_note.c_str());
  return flotilla_test::summary("test_local_restarts");
}
