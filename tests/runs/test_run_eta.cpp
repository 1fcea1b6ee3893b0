// Time left from a run's own measured pace (runs/run_speed.h measured_seconds_per_step and
// remaining_seconds; issue 18 "ETA from measured step times, not the plan"): the wall-clock seconds
// per step over the stored steps' record times, the window cut at a pause so a resumed run is timed
// by its current session, and the time left at that pace. On a real SQLite store.
#include <cstdio>
#include <filesystem>
#include <string>

#include "check.h"
#include "db/database.h"
#include "db/run_store.h"
#include "db/sql.h"  // the test writes metric rows as the ingestor does, by hand
#include "runs/run_speed.h"

namespace fs = std::filesystem;
namespace db = flotilla::db;
using flotilla::runs::measured_seconds_per_step;
using flotilla::runs::remaining_seconds;

namespace {

void add_step(const db::Database& d, int64_t run, int64_t step, double time) {
  db::Stmt st(d, "INSERT INTO metrics (run_id, name, step, value, time) VALUES (?1, 'loss', ?2, 5.0, ?3)");
  st.bind(1, run).bind(2, step).bind(3, time);
  st.run();
}

}  // namespace

int main() {
  const fs::path dir = fs::path(FLOTILLA_TEST_TMP) / "run_eta";
  fs::remove_all(dir);
  fs::create_directories(dir);
  db::Database d((dir / "runs.db").string());
  db::NewRun r;
  r.name = "eta";
  r.target = "local";
  const int64_t run = db::create_run(d, r);

  // No steps, one step: no pace; no plan: no time left.
  CHECK(measured_seconds_per_step(d, run) == 0);
  add_step(d, run, 1, 1000.0);
  CHECK(measured_seconds_per_step(d, run) == 0);
  CHECK(remaining_seconds(100, 1, 0) < 0);
  CHECK(remaining_seconds(0, 1, 2.0) < 0);

  // Steps 1..40 at 2 s each, then a 2-hour stop, then steps 41..60 at 0.5 s each (resumed on a
  // faster machine): the pace is the current session's 0.5 s, not a mean over the pause.
  for (int s = 2; s <= 40; ++s) add_step(d, run, s, 1000.0 + 2.0 * (s - 1));
  CHECK_NEAR(measured_seconds_per_step(d, run), 2.0, 1e-9);
  const double resumed = 1000.0 + 2.0 * 39 + 7200.0;
  for (int s = 41; s <= 60; ++s) add_step(d, run, s, resumed + 0.5 * (s - 41));
  CHECK_NEAR(measured_seconds_per_step(d, run), 0.5, 1e-9);
  // Time left for 1,000 planned steps from step 60: 940 × 0.5 s.
  CHECK_NEAR(remaining_seconds(1000, 60, measured_seconds_per_step(d, run)), 470.0, 1e-6);
  CHECK(remaining_seconds(1000, 1000, 0.5) == 0);
  // The window: only the last `window` steps count (steps 51..60 at 0.5 s).
  CHECK_NEAR(measured_seconds_per_step(d, run, 10), 0.5, 1e-9);
  return flotilla_test::summary("test_run_eta");
}
