// The runs layer's lifecycle of a run on this machine, driven directly with the real worker (the
// CLI and the app are thin over it): start -> completed with every step stored once; stop ->
// stopped with a checkpoint; kill -> stopped, no rank left; a data error -> failed with the exit
// code's name; a stall (exit 11) -> failed "stalled"; leave and re-attach by pid and start time ->
// every step once; a worker gone while nobody watched -> settled from its files with its accrual
// closed when it ended; an invalid config -> refused before anything starts or is stored; a
// stopped multi-rank run reports no "rank exited" error.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <fstream>

#include "db/ingest.h"
#include "engine/core/error.h"
#include "runs/process.h"
#include "runs/stale_runs.h"
#include "runs_fixture.h"

using namespace runs_test;
namespace db = flotilla::db;
namespace runs = flotilla::runs;

namespace {

void completes_with_every_step_stored(db::Writer& writer, const std::string& dir) {
  Started s = create_and_start(writer, dir, tiny_config(40, "", 20), "complete");
  CHECK(stored(writer.path(), s.run.run_id).status == db::RunStatus::kRunning);
  Watcher w(&writer, s.watch);
  CHECK(w.wait(120));
  const runs::LocalOutcome& o = w.outcome();
  CHECK_MSG(o.exit_code == 0, "exit %d: %s", o.exit_code, w.notes().c_str());
  const db::Run r = stored(writer.path(), s.run.run_id);
  CHECK(r.status == db::RunStatus::kCompleted && r.status_note.empty());
  CHECK(steps_stored(writer.path(), s.run.run_id) == 40);
  CHECK(o.last_step == 40);
  const db::Database d(writer.path());
  CHECK(db::committed_offset(d, s.run.run_id, runs::kMetricsFile) ==
        static_cast<int64_t>(fs::file_size(s.run.run_dir + "/metrics.jsonl")));
  for (const db::Accrual& a : db::run_accruals(d, s.run.run_id)) CHECK(a.end.has_value());  // closed
  // The run folder holds what it needs: its config, the pid it ran as, the worker's log.
  CHECK(fs::exists(s.run.run_dir + "/run.toml") && fs::exists(s.run.run_dir + "/worker.pid"));
  CHECK(runs::live_worker_pid(s.run.run_dir) == 0);  // it ended
}

void a_stop_checkpoints_and_ends_stopped(db::Writer& writer, const std::string& dir) {
  Started s = create_and_start(writer, dir, tiny_config(100000, "", 100000), "stop");
  Watcher w(&writer, s.watch);
  CHECK(wait_until([&] { return steps_stored(writer.path(), s.run.run_id) >= 5; }, 60));
  w.stop();
  CHECK(w.wait(60));
  CHECK_MSG(w.outcome().exit_code == 10, "exit %d", w.outcome().exit_code);
  const db::Run r = stored(writer.path(), s.run.run_id);
  CHECK_MSG(r.status == db::RunStatus::kStopped && r.status_note == "on request", "%s (%s)", db::to_string(r.status),
            r.status_note.c_str());
  const db::Database d(writer.path());
  const auto cps = db::list_checkpoints(d, s.run.run_id);
  CHECK(!cps.empty() && cps.back().reason == "stop");
  // Issue 34 #16: the worker's own words say it was stopped on request (not "exit preempted"), and
  // launch's event in worker.log is info, not an error "rank 0 exited with code 10 (preempted)".
  CHECK_MSG(r.summary_json.find("\"exit\":\"stopped\"") != std::string::npos &&
                r.summary_json.find("\"stop_reason\":\"stopped on request") != std::string::npos,
            "%s", r.summary_json.c_str());
  {
    std::ifstream log(s.run.run_dir + "/worker.log");
    for (std::string line; std::getline(log, line);)
      CHECK_MSG(!(line.find("\"level\":\"error\"") != std::string::npos && line.find("code 10") != std::string::npos),
                "worker.log: %s", line.c_str());
  }
  // The launcher's "rank 0 exited with code 10 (preempted)" is the end we asked for, not an error.
  CHECK_MSG(w.notes().find("exited with code 10") == std::string::npos, "%s", w.notes().c_str());
  for (const db::EventInfo& e : db::list_events(d, s.run.run_id)) {
    if (e.kind == "launch") CHECK_MSG(e.level == "info", "%s: %s", e.level.c_str(), e.message.c_str());
    // The stored reason says what happened, not exit 10's name ("worker exit 10: preempted").
    if (e.kind == "status")
      CHECK_MSG(e.message.find("preempted") == std::string::npos, "%s", e.message.c_str());
  }
}

void a_kill_leaves_no_rank_behind(db::Writer& writer, const std::string& dir) {
  Started s = create_and_start(writer, dir, tiny_config(100000, "[parallel]\ndp = 2\n", 100000), "kill");
  Watcher w(&writer, s.watch);
  CHECK(wait_until([&] { return steps_stored(writer.path(), s.run.run_id) >= 3; }, 90));
  const std::vector<pid_t> ranks = runs::child_pids(s.watch.pid);
  CHECK(ranks.size() == 2);
  w.kill();
  CHECK(w.wait(30));
  const db::Run r = stored(writer.path(), s.run.run_id);
  CHECK(r.status == db::RunStatus::kStopped && r.status_note == "killed on request");
  CHECK(wait_until(
      [&] {
        for (pid_t p : ranks)
          if (runs::process_alive(p)) return false;
        return true;
      },
      10));
}

void a_data_error_fails_with_its_name(db::Writer& writer, const std::string& dir) {
  const std::string toml =
      "[run]\nname = \"x\"\nthreads = 1\n[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\nn_embd = 32\n"
      "vocab_size = 128\nmax_seq_len = 32\n[data]\nsource = \"shards\"\ntrain = \"" +
      dir + "/no-such-shard_*.bin\"\n[eval]\nevery = 0\n[train]\nsteps = 5\nmicro_batch = 2\nseq_len = 16\n";
  Started s = create_and_start(writer, dir, toml, "data-error");
  Watcher w(&writer, s.watch);
  CHECK(w.wait(60));
  CHECK(w.outcome().exit_code == 4);
  const db::Run r = stored(writer.path(), s.run.run_id);
  CHECK(r.status == db::RunStatus::kFailed);
  CHECK_MSG(r.status_note.find("exit 4: data error") == 0, "note: %s", r.status_note.c_str());
  CHECK(!w.outcome().root_cause.empty());  // launch's report of the failed rank
}

// A worker that exits 11 as launch does when a rank stalls: failed, "stalled".
void a_stall_fails_as_stalled(db::Writer& writer, const std::string& dir) {
  const std::string script = dir + "/stall.sh";
  {
    std::ofstream f(script);
    f << "#!/bin/sh\necho 'rank 0 made no progress for 100 s at step 3' >&2\nexit 11\n";
  }
  fs::permissions(script, fs::perms::owner_all);
  runs::NewRunRequest req;
  req.config = config_of(tiny_config(10));
  req.name = "stall";
  req.explicit_name = true;
  req.runs_root = dir + "/runs";
  const runs::NewRun nr = runs::create_local_run(writer, req);
  runs::SpawnOptions spawn;
  spawn.argv = {script};
  spawn.run_dir = nr.run_dir;
  Watcher w(&writer, runs::start_local_run(&writer, nr.run_id, nr.name, spawn, "test", 10));
  CHECK(w.wait(30));
  const db::Run r = stored(writer.path(), nr.run_id);
  CHECK(r.status == db::RunStatus::kFailed && r.status_note.find("exit 11: stalled") == 0);
}

void a_left_run_is_reattached_by_pid(db::Writer& writer, const std::string& dir) {
  Started s = create_and_start(writer, dir, tiny_config(3000, "", 1000), "reattach");
  {
    Watcher w(&writer, s.watch);
    CHECK(wait_until([&] { return steps_stored(writer.path(), s.run.run_id) >= 20; }, 60));
    w.leave();  // the app closes, "leave it running"
    CHECK(w.wait(10));
    CHECK(w.outcome().exit_code == runs::kLeft && !w.outcome().recorded);
  }
  CHECK(stored(writer.path(), s.run.run_id).status == db::RunStatus::kRunning);
  const runs::LocalWatch again =
      runs::attach_local_run(s.run.run_id, s.run.name, s.run.run_dir, "test (re-attached)", s.run.config.train.steps);
  CHECK(again.pid == s.watch.pid && !again.own_child);
  Watcher w(&writer, again);
  CHECK(w.wait(180));
  const db::Run r = stored(writer.path(), s.run.run_id);
  CHECK_MSG(r.status == db::RunStatus::kCompleted, "%s (%s)", db::to_string(r.status), r.status_note.c_str());
  CHECK(steps_stored(writer.path(), s.run.run_id) == 3000);  // every step exactly once
  const db::Database d(writer.path());
  CHECK(db::committed_offset(d, s.run.run_id, runs::kMetricsFile) ==
        static_cast<int64_t>(fs::file_size(s.run.run_dir + "/metrics.jsonl")));
  // The worker is not our child: it is reaped by init; the watch ended by its summary.
  CHECK(w.outcome().exit_code == 0);
}

void a_gone_worker_is_settled_from_its_files(db::Writer& writer, const std::string& dir) {
  Started s = create_and_start(writer, dir, tiny_config(100000, "", 100000), "gone");
  {
    Watcher w(&writer, s.watch);
    CHECK(wait_until([&] { return steps_stored(writer.path(), s.run.run_id) >= 5; }, 60));
    w.leave();
    CHECK(w.wait(10));
  }
  // Nobody watches; the worker writes on, then dies without a word (kill -9 of its tree).
  const int64_t before = steps_stored(writer.path(), s.run.run_id);
  CHECK(wait_until([&] { return fs::file_size(s.run.run_dir + "/metrics.jsonl") > 40000; }, 60));
  runs::kill_worker_tree(s.watch.pid);
  int status = 0;
  ::waitpid(s.watch.pid, &status, 0);
  struct stat st {};
  ::stat((s.run.run_dir + "/metrics.jsonl").c_str(), &st);
  const double died = static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec / 1e9;
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // "noticed" well after it ended
  const auto settled = runs::settle_stale_local_runs(writer, "test settling");
  CHECK(settled.size() == 1);
  const db::Run r = stored(writer.path(), s.run.run_id);
  CHECK(r.status == db::RunStatus::kFailed);
  CHECK_MSG(r.status_note.find("lost") == 0, "note: %s", r.status_note.c_str());
  // What it wrote while nobody stored it is stored now, by offset: every line once.
  int64_t lines = 0;
  {
    std::ifstream f(s.run.run_dir + "/metrics.jsonl");
    for (std::string l; std::getline(f, l);) lines += l.find("\"type\":\"step\"") != std::string::npos;
  }
  CHECK(steps_stored(writer.path(), s.run.run_id) == lines && lines > before);
  // The accrual closed when the worker ended, not when it was noticed.
  const db::Database d(writer.path());
  for (const db::Accrual& a : db::run_accruals(d, s.run.run_id)) {
    CHECK(a.end.has_value());
    CHECK_MSG(a.end && std::abs(*a.end - died) < 1.0, "closed at %.3f, the worker died at %.3f", *a.end, died);
  }
  CHECK(runs::settle_stale_local_runs(writer, "again").empty());  // nothing left to settle
}

void an_invalid_config_starts_nothing(db::Writer& writer, const std::string& dir) {
  runs::NewRunRequest req;
  req.config = config_of(tiny_config(10, "[parallel]\ntp = 3\n"));  // 2 heads: tp 3 does not divide them
  req.name = "invalid";
  req.explicit_name = true;
  req.runs_root = dir + "/runs";
  bool refused = false;
  try {
    runs::create_local_run(writer, req);
  } catch (const flotilla::Error& e) {
    refused = e.code() == flotilla::ExitCode::kConfig && std::string(e.what()).find("tp") != std::string::npos;
  }
  CHECK(refused);
  const db::Database d(writer.path());
  CHECK(!db::find_run(d, "invalid"));         // no row
  CHECK(!fs::exists(dir + "/runs/invalid"));  // no folder, no process
}

void a_created_row_that_never_started_is_ended(db::Writer& writer) {
  int64_t id = 0;
  writer.run([&](db::Database& d) {
    db::NewRun n;
    n.name = "never-started";
    n.run_dir = "/nonexistent/never-started";
    n.created_at = db::now_seconds() - 3600;
    id = db::create_run(d, n);
  });
  runs::settle_stale_local_runs(writer, "test");
  const db::Run r = stored(writer.path(), id);
  CHECK(r.status == db::RunStatus::kFailed && r.status_note.find("never started") == 0);
}

}  // namespace

int main() {
  const std::string dir = scratch("lifecycle");
  db::Writer writer(dir + "/store.db");
  completes_with_every_step_stored(writer, dir);
  a_stop_checkpoints_and_ends_stopped(writer, dir);
  a_kill_leaves_no_rank_behind(writer, dir);
  a_data_error_fails_with_its_name(writer, dir);
  a_stall_fails_as_stalled(writer, dir);
  a_left_run_is_reattached_by_pid(writer, dir);
  a_gone_worker_is_settled_from_its_files(writer, dir);
  an_invalid_config_starts_nothing(writer, dir);
  a_created_row_that_never_started_is_ended(writer);
  return flotilla_test::summary("test_local_lifecycle");
}
