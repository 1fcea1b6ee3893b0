// node_power and idle_accruals (db/node_power.h): commands stored as JSON arrays come back argument
// for argument (spaces, quotes, `;`, `$(...)`, newlines, non-ASCII); the settings survive a state
// change and --off keeps the commands; idle accruals sum to the right money per node and in a
// window (clipped at its edges, an open interval up to its end), one open interval per node, and a
// closed interval stops accruing.
#include <cmath>
#include <string>
#include <vector>

#include "db/costs.h"
#include "db/errors.h"
#include "db/node_power.h"
#include "db/run_store.h"
#include "store_fixture.h"

using namespace flotilla::db;
using namespace store_test;

namespace {

void test_settings(Database& db) {
  const int64_t vm = ensure_node(db, "vm-1", "ssh");
  const std::vector<std::string> stop = {
      "gcloud",          "compute",     "instances", "stop", "vm 1; rm -rf ~", "$(touch /tmp/pwned)",
      "it's \"quoted\"", "line\nbreak", "",          "héllo"};
  NodePower p;
  p.node_id = vm;
  p.idle_limit_s = 1800;
  p.stop_argv = stop;
  p.start_argv = {"gcloud", "compute", "instances", "start", "vm-1"};
  set_node_power(db, p);
  auto got = node_power(db, vm);
  CHECK(got && got->node_name == "vm-1" && got->idle_limit_s == 1800.0);
  CHECK(got && got->stop_argv == stop);
  CHECK(got && got->start_argv.size() == 5 && got->state == kPowerOn && !got->idle_since);
  // Stored as a JSON array, never a joined line.
  CHECK(argv_from_json(argv_to_json(stop)) == stop);
  CHECK_THROWS(argv_from_json("gcloud stop"), "not a JSON array");
  CHECK_THROWS(argv_from_json("[1]"), "non-text argument");
  CHECK_THROWS(argv_to_json({std::string("\xff\xfe")}), "not valid UTF-8");

  // A state change keeps the settings; a new setting keeps the state.
  set_power_state(db, vm, kPowerStopped, 100);
  set_idle_since(db, vm, 50.0);
  p.idle_limit_s = 600;
  set_node_power(db, p);
  got = node_power(db, vm);
  CHECK(got && got->state == kPowerStopped && got->since == 100 && got->idle_limit_s == 600.0);
  CHECK_THROWS(set_power_state(db, vm, "off", 1), "unknown node power state");
  // --off clears the limit and keeps the commands.
  CHECK(clear_idle_limit(db, vm));
  got = node_power(db, vm);
  CHECK(got && !got->idle_limit_s && got->stop_argv == stop && !got->idle_since);
  CHECK(list_node_power(db).size() == 1);
  p.node_id = 9999;
  CHECK_THROWS(set_node_power(db, p), "does not exist");
}

void test_idle_money(Database& db) {
  const int64_t a = ensure_node(db, "rent-a", "ssh");
  const int64_t b = ensure_node(db, "rent-b", "ssh");
  const double t0 = 1767225600;  // 2026-01-01T00:00:00Z
  // a: $3/h idle for 40 min, then (a second open is refused while one is open) closed.
  CHECK(open_idle_accrual(db, a, t0, 3.0));
  CHECK(!open_idle_accrual(db, a, t0 + 60, 99.0));
  CHECK(close_idle_accrual(db, a, t0 + 2400, "stopped by autostop after 30 min idle"));
  CHECK(!close_idle_accrual(db, a, t0 + 9999));
  // b: $1.20/h for 1 h, then again from t0 + 2 h, still open.
  CHECK(open_idle_accrual(db, b, t0, 1.2));
  CHECK(close_idle_accrual(db, b, t0 + 3600, "a run started"));
  CHECK(open_idle_accrual(db, b, t0 + 7200, 1.2));

  const double to = t0 + 3 * 3600;  // b's open interval counts up to here: 1 h
  const auto lines = idle_costs_by_node(db, 0, to);
  CHECK(lines.size() == 2);
  CHECK(lines.size() == 2 && lines[0].key == "rent-a" && lines[1].key == "rent-b");
  if (lines.size() == 2) {
    CHECK_NEAR(lines[0].usd, 2.0, 1e-9);  // 40 min × $3/h
    CHECK_NEAR(lines[0].running_s, 2400, 1e-6);
    CHECK_NEAR(lines[1].usd, 2.4, 1e-9);  // 2 h × $1.20/h
    CHECK_NEAR(lines[1].hours, 2.0, 1e-9);
    CHECK(lines[0].priced && lines[1].priced);
  }
  CHECK_NEAR(idle_cost_usd(db, 0, to), 4.4, 1e-9);
  // A window clips: [t0 + 30 min, t0 + 2.5 h] holds a's last 10 min ($0.50), b's last 30 min of its
  // first hour and 30 min of the open one ($1.20).
  CHECK_NEAR(idle_cost_usd(db, t0 + 1800, t0 + 9000), 0.5 + 1.2, 1e-9);
  CHECK(idle_accruals(db, t0 + 3601, t0 + 7199).size() == 0);
  // The closed interval stops accruing: later `to` adds only b's open one.
  CHECK_NEAR(idle_cost_usd(db, 0, to + 3600), 4.4 + 1.2, 1e-9);
  const auto rows = idle_accruals(db);
  CHECK(rows.size() == 3 && rows[0].note == "stopped by autostop after 30 min idle" &&
        rows[0].end == t0 + 2400);
  // The same arithmetic as run accruals (costs.h): accrued_until over the converted rows.
  CHECK_NEAR(accrued_until(idle_as_accruals(rows, 0, to), to, true), 4.4, 1e-9);
}

void test_running_nodes(Database& db) {
  const int64_t n = ensure_node(db, "busy", "ssh");
  const int64_t run = make_run(db, "r1");
  attach_node(db, run, n, 1);
  CHECK(nodes_with_running_runs(db).count(n) == 0);
  set_status(db, run, RunStatus::kRunning, 1767225600);
  CHECK(nodes_with_running_runs(db).count(n) == 1);
  CHECK(nodes_with_running_runs(db)[n] == 1767225600);
  set_status(db, run, RunStatus::kCompleted, 1767225700);
  CHECK(nodes_with_running_runs(db).count(n) == 0);
}

}  // namespace

int main() {
  const auto dir = scratch("node_power", "store");
  Database db((dir / "flotilla.db").string());
  test_settings(db);
  test_idle_money(db);
  test_running_nodes(db);
  return flotilla_test::summary("test_node_power");
}
