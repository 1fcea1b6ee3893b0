// The run store's disk fills (issue 16; docs/reliability.md D3), injected with PRAGMA max_page_count on
// the writer's connection (SQLite then answers SQLITE_FULL exactly as for a full disk):
// - mid-run: training goes on, nothing blocks; when space comes back the watcher stores the
//   missing steps from metrics.jsonl by offset, and the status says what happened;
// - until the end: the end cannot be recorded; the run is settled once writing works again, with
//   every step stored, the status its summary gives, and its accrual closed when the worker ended;
// - at the start: nothing is left behind, not even a row in `created`.
#include <cstdlib>
#include <fstream>

#include "db/errors.h"
#include "db/sql.h"
#include "runs/stale_runs.h"
#include "runs_fixture.h"

using namespace runs_test;
namespace db = flotilla::db;
namespace runs = flotilla::runs;

namespace {

void fill(db::Writer& writer, bool full) {
  writer.run([full](db::Database& d) {
    if (!full) {
      d.exec("PRAGMA max_page_count = 1073741823");
      return;
    }
    // Room for nothing more than what is there now.
    d.exec("PRAGMA max_page_count = " + std::to_string(db::query_int(d, "PRAGMA page_count")));
  });
}

int64_t step_lines(const std::string& run_dir) {
  std::ifstream f(run_dir + "/metrics.jsonl");
  int64_t n = 0;
  for (std::string l; std::getline(f, l);) n += l.find("\"type\":\"step\"") != std::string::npos;
  return n;
}

void full_for_a_while(db::Writer& writer, const std::string& dir) {
  Started s = create_and_start(writer, dir, tiny_config(1000000, "", 1000000), "full-mid-run");
  Watcher w(&writer, s.watch);
  CHECK(wait_until([&] { return steps_stored(writer.path(), s.run.run_id) >= 20; }, 60));
  fill(writer, true);
  const int64_t at_full = step_lines(s.run.run_dir);
  CHECK(wait_until([&] { return w.notes().find("storing the metrics failed") != std::string::npos; }, 20));
  CHECK(wait_until([&] { return step_lines(s.run.run_dir) > at_full + 200; }, 30));  // training goes on
  CHECK(runs::process_alive(s.watch.pid));
  const int64_t stored_while_full = steps_stored(writer.path(), s.run.run_id);
  CHECK(stored_while_full < step_lines(s.run.run_dir));
  fill(writer, false);  // space is back
  CHECK(wait_until([&] { return steps_stored(writer.path(), s.run.run_id) > stored_while_full + 200; }, 30));
  w.stop();
  CHECK(w.wait(60));
  CHECK(w.outcome().stored_all && w.outcome().recorded);
  const db::Run r = stored(writer.path(), s.run.run_id);
  CHECK(r.status == db::RunStatus::kStopped);
  CHECK_MSG(r.status_note.find("the store was full for a while") != std::string::npos, "note: %s",
            r.status_note.c_str());
  CHECK(steps_stored(writer.path(), s.run.run_id) ==
        step_lines(s.run.run_dir));  // none missing, none doubled
}

void full_until_the_end(db::Writer& writer, const std::string& dir) {
  // Paced so the store is full before the worker ends: a tiny step takes well under a millisecond
  // on a fast machine, and 30,000 unpaced ones once finished (and were stored) first. 3,000 steps
  // of at least 2 ms last 6 s or more; the store fills after the first 20 are stored.
  constexpr int kSteps = 3000;
  ::setenv("FLOTILLA_TEST_STEP_SLEEP_MS", "2", 1);  // the worker inherits it (runs/process.cpp)
  Started s = create_and_start(writer, dir, tiny_config(kSteps, "", 10000), "full-to-the-end");
  ::unsetenv("FLOTILLA_TEST_STEP_SLEEP_MS");
  Watcher w(&writer, s.watch);
  CHECK(wait_until([&] { return steps_stored(writer.path(), s.run.run_id) >= 20; }, 60));
  fill(writer, true);
  CHECK(w.wait(120));
  const runs::LocalOutcome& o = w.outcome();
  CHECK(o.exit_code == 0);              // the worker finished its run
  CHECK_MSG(!o.stored_all && !o.recorded, "stored_all %d recorded %d, %lld of %d steps stored, error '%s'",
            o.stored_all, o.recorded, static_cast<long long>(steps_stored(writer.path(), s.run.run_id)), kSteps,
            o.store_error.c_str());  // but the store could take neither its rows nor its end
  CHECK(o.store_error.find("full") != std::string::npos);
  const double worker_end = o.end.at;
  CHECK(stored(writer.path(), s.run.run_id).status == db::RunStatus::kRunning);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  fill(writer, false);
  // The next command settles it: the rest stored by offset, the end its summary gives.
  const auto settled = runs::settle_stale_local_runs(writer, "test after the disk was freed");
  CHECK(settled.size() == 1);
  const db::Run r = stored(writer.path(), s.run.run_id);
  CHECK_MSG(r.status == db::RunStatus::kCompleted, "%s (%s)", db::to_string(r.status), r.status_note.c_str());
  CHECK(steps_stored(writer.path(), s.run.run_id) == kSteps);
  const db::Database d(writer.path());
  for (const db::Accrual& a : db::run_accruals(d, r.id))
    CHECK_MSG(a.end && *a.end <= worker_end + 1.0, "accrual closed at %.2f, worker ended at %.2f",
              a.end.value_or(0), worker_end);
}

void full_at_the_start(db::Writer& writer, const std::string& dir) {
  fill(writer, true);
  runs::NewRunRequest req;
  req.config = config_of(tiny_config(10));
  req.name = "full-at-start";
  req.explicit_name = true;
  req.runs_root = dir + "/runs";
  bool full = false;
  try {
    runs::create_local_run(writer, req);
  } catch (const db::DbError& e) {
    full = e.kind() == db::DbErrorKind::kFull;
  }
  CHECK(full);
  fill(writer, false);
  CHECK(!db::find_run(db::Database(writer.path()), "full-at-start"));  // no orphan row
  CHECK(!fs::exists(dir + "/runs/full-at-start/worker.pid"));          // nothing started
}

}  // namespace

int main() {
  const std::string dir = scratch("diskfull");
  db::Writer writer(dir + "/store.db");
  full_for_a_while(writer, dir);
  full_until_the_end(writer, dir);
  full_at_the_start(writer, dir);
  return flotilla_test::summary("test_local_diskfull");
}
