// Runs: the status state machine (every allowed and refused change), unique names, started/ended
// stamps, tags and notes, forks, and delete cascading to everything the run owns.
#include <string>

#include "db/errors.h"
#include "db/metric_sink.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "db/sql.h"
#include "store_fixture.h"

using namespace flotilla::db;
using namespace store_test;

int main() {
  const fs::path dir = scratch("db_run_store", "all");
  Database db((dir / "runs.db").string());
  using S = RunStatus;
  // The table in docs/store.md, as code.
  const S all[] = {S::kCreated,   S::kQueued,  S::kRunning, S::kPaused,
                   S::kPreempted, S::kStopped, S::kFailed,  S::kCompleted};
  int allowed = 0;
  for (S from : all)
    for (S to : all) allowed += from != to && transition_allowed(from, to);
  CHECK_MSG(allowed == 24, "%d allowed changes", allowed);
  CHECK(transition_allowed(S::kRunning, S::kPaused) && transition_allowed(S::kPaused, S::kRunning));
  CHECK(transition_allowed(S::kPreempted, S::kRunning) && transition_allowed(S::kFailed, S::kRunning));
  CHECK(!transition_allowed(S::kCompleted, S::kRunning));
  CHECK(!transition_allowed(S::kCreated, S::kCompleted));
  CHECK(!transition_allowed(S::kCreated, S::kPaused));
  for (S s : all) CHECK(parse_run_status(to_string(s)) == s);
  CHECK_THROWS(parse_run_status("zombie"), "unknown run status");

  const int64_t id = make_run(db, "r1");
  CHECK_THROWS(make_run(db, "r1"), "already exists");
  CHECK(unique_run_name(db, "r1") == "r1-2");
  CHECK(unique_run_name(db, "fresh") == "fresh");
  CHECK(find_run(db, std::to_string(id))->name == "r1");  // by id
  CHECK_THROWS(get_run(db, "nope"), "runs list");

  CHECK_THROWS(set_status(db, id, S::kCompleted, 10), "cannot go from created to completed");
  CHECK(set_status(db, id, S::kRunning, 100) == S::kCreated);
  set_status(db, id, S::kPaused, 150);
  CHECK(*get_run(db, id).ended_at == 150);
  set_status(db, id, S::kRunning, 200);
  Run r = get_run(db, id);
  CHECK(*r.started_at == 100 && !r.ended_at);  // first start kept; resumed: no end
  set_status(db, id, S::kCompleted, 300, "done", 0);
  r = get_run(db, id);
  CHECK(r.status == S::kCompleted && *r.ended_at == 300 && *r.exit_code == 0);
  CHECK_THROWS(set_status(db, id, S::kRunning, 400), "cannot go from completed to running");
  CHECK(get_run(db, id).status == S::kCompleted);  // a refused change changes nothing
  int status_events = 0;
  for (const auto& e : list_events(db, id)) status_events += e.kind == "status";
  CHECK(status_events == 5);  // created + 4 changes

  set_tags(db, id, {"b", "a", "a"});
  set_notes(db, id, "first try");
  r = get_run(db, id);
  CHECK((r.tags == std::vector<std::string>{"a", "b"}) && r.notes == "first try");
  CHECK_THROWS(set_notes(db, 9999, "x"), "does not exist");

  const int64_t fork = fork_run(db, id, "r1-fork");
  CHECK(*get_run(db, fork).parent_id == id && get_run(db, fork).parent_kind == "fork");
  CHECK((get_run(db, fork).tags == std::vector<std::string>{"a", "b"}));

  MetricSink sink(db);
  db.write_transaction([&] { sink.insert({{id, "loss", 1, 1.0, 1.0}, {id, "loss", 2, 0.5, 2.0}}); });
  add_event(db, id, 5, "worker", "warning", "hot");
  CHECK(delete_run(db, id) == 2);
  CHECK(!find_run(db, "r1"));
  CHECK(query_int(db, "SELECT count(*) FROM metrics") == 0);
  CHECK(query_int(db, "SELECT count(*) FROM metric_blocks") == 0);
  CHECK(query_int(db, "SELECT count(*) FROM events WHERE run_id = " + std::to_string(id)) == 0);
  CHECK(!get_run(db, fork).parent_id);  // the fork survives its parent
  return flotilla_test::summary("test_run_store");
}
