// The store's disk fills in the narrow window of a local run's start (issue 33, D12;
// docs/reliability.md L6): the row is created, then `created -> running` cannot be stored. Real
// parts: the store on a small tmpfs filled by a file (needs root; skipped with a note otherwise),
// the real worker.
// - the window: the worker is stopped before it trains, the new row and what the start wrote are
//   removed, and the error says the disk is full;
// - a row left `created` although its worker ran and trained (what an older start left behind) is
//   settled by the next command: recorded running from the worker's start, every step stored,
//   ended as its summary says.
#include <sys/mount.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstring>
#include <regex>

#include "db/errors.h"
#include "runs/stale_runs.h"
#include "runs_fixture.h"

using namespace runs_test;
namespace db = flotilla::db;
namespace runs = flotilla::runs;

namespace {

// Fills the file system holding `dir` until a write fails with ENOSPC.
void fill(const std::string& dir) {
  std::ofstream f(dir + "/filler", std::ios::binary);
  const std::string block(4096, 'x');
  while (f.write(block.data(), block.size())) {
  }
}

runs::SpawnOptions spawn_of(const runs::NewRun& nr) {
  runs::TrainCommand c;
  c.worker = runs::find_worker(FLOTILLA_WORKER_PATH);
  c.config_path = nr.config_path;
  c.ranks = runs::ranks_of(nr.config);
  c.no_bind = true;
  runs::SpawnOptions spawn;
  spawn.argv = runs::train_argv(c);
  spawn.run_dir = nr.run_dir;
  spawn.env = {"OMP_NUM_THREADS=1"};
  return spawn;
}

runs::NewRun create(db::Writer& writer, const std::string& dir, const std::string& name, int steps) {
  runs::NewRunRequest req;
  req.config = config_of(tiny_config(steps));
  req.name = name;
  req.explicit_name = true;
  req.runs_root = dir + "/runs";
  return runs::create_local_run(writer, req);
}

void full_between_create_and_running(const std::string& dir, const std::string& mnt) {
  db::Writer writer(mnt + "/store.db");
  const runs::NewRun nr = create(writer, dir, "narrow", 100000);
  // The disk fills now. The WAL is emptied first so the next write must grow it (a WAL with room
  // from earlier writes would take a small one: the window is narrow).
  db::Database(writer.path()).exec("PRAGMA wal_checkpoint(TRUNCATE)");
  fill(mnt);
  std::string msg;
  db::DbErrorKind kind = db::DbErrorKind::kQuery;
  try {
    runs::start_local_run(&writer, nr.run_id, nr.name, spawn_of(nr), "test", nr.config.train.steps);
  } catch (const db::DbError& e) {
    msg = e.what();
    kind = e.kind();
  }
  std::printf("the store's disk full between the row and its start:\n  %s\n", msg.c_str());
  std::fflush(stdout);
  CHECK_MSG(kind == db::DbErrorKind::kFull &&
                msg.find("was stopped before it trained") != std::string::npos &&
                msg.find("full") != std::string::npos,
            "kind %d: %s", static_cast<int>(kind), msg.c_str());
  std::smatch m;
  const bool named = std::regex_search(msg, m, std::regex("pid ([0-9]+)"));
  CHECK(named);
  if (named) CHECK(!runs::process_alive(static_cast<pid_t>(std::stol(m[1]))));  // not training unrecorded
  fs::remove(mnt + "/filler");
  // The full disk may refuse the row's removal too: then the next command that can write removes
  // it (its folder shows a worker that never trained a step).
  if (db::find_run(db::Database(writer.path()), "narrow")) {
    const auto settled = runs::settle_stale_local_runs(writer, "test after the disk was freed");
    CHECK(settled.size() == 1 && settled[0].removed);
  }
  // Nothing is left: no row (not even `created`), no run folder.
  CHECK_MSG(!db::find_run(db::Database(writer.path()), "narrow"), "the row of run narrow is left: %s",
            db::to_string(db::get_run(db::Database(writer.path()), "narrow").status));
  CHECK_MSG(!fs::exists(nr.run_dir), "%s is left", nr.run_dir.c_str());
  // And the store works: the same name starts and completes.
  Started s = create_and_start(writer, dir, tiny_config(20), "narrow");
  Watcher w(&writer, s.watch);
  CHECK(w.wait(120));
  CHECK(stored(writer.path(), s.run.run_id).status == db::RunStatus::kCompleted);
}

void a_created_row_whose_worker_ran_is_settled(const std::string& dir) {
  db::Writer writer(dir + "/settle.db");
  const runs::NewRun nr = create(writer, dir, "unrecorded", 30);
  // The worker runs to its end while the store never hears that it started (as when the store
  // refused `created -> running` before this fix).
  const pid_t pid = runs::spawn_worker(spawn_of(nr));
  int status = 0;
  ::waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(stored(writer.path(), nr.run_id).status == db::RunStatus::kCreated);
  const auto settled = runs::settle_stale_local_runs(writer, "test");
  CHECK(settled.size() == 1);
  const db::Run r = stored(writer.path(), nr.run_id);
  std::printf("a created row whose worker ran, settled: %s (%s), %lld steps stored\n",
              db::to_string(r.status), r.status_note.c_str(),
              static_cast<long long>(steps_stored(writer.path(), nr.run_id)));
  CHECK_MSG(r.status == db::RunStatus::kCompleted, "%s (%s)", db::to_string(r.status), r.status_note.c_str());
  CHECK(steps_stored(writer.path(), nr.run_id) == 30);
  CHECK(r.started_at.has_value() && r.ended_at.has_value() && *r.ended_at >= *r.started_at);
  // A second settle leaves it alone.
  CHECK(runs::settle_stale_local_runs(writer, "test").empty());
}

}  // namespace

int main() {
  const std::string dir = scratch("start_diskfull");
  a_created_row_whose_worker_ran_is_settled(dir);
  const std::string mnt = dir + "/mnt";
  fs::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=2m") != 0) {
    std::printf(
        "test_local_start_diskfull: the full-disk part skipped: cannot mount a tmpfs at %s (%s); needs "
        "root\n",
        mnt.c_str(), std::strerror(errno));
    return flotilla_test::summary("test_local_start_diskfull");
  }
  try {
    full_between_create_and_running(dir, mnt);
  } catch (const std::exception& e) {
    CHECK_MSG(false, "%s", e.what());
  }
  ::umount2(mnt.c_str(), MNT_DETACH);
  return flotilla_test::summary("test_local_start_diskfull");
}
