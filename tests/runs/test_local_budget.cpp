// Budgets that stop runs (issue 16), through the runs layer with the real worker: a config-priced
// run (budget.usd_per_hour = 36: a cent a second) stops with a checkpoint at budget.max_usd and
// another at budget.max_hours, within a few seconds of crossing, with the cost stored and the
// reason recorded ("budget reached: $0.0201 of $0.02"); --budget overrides max_usd; the machine's
// own price is used when the config has none; a budget on an unpriced machine is refused before
// anything starts, with the fix named; the warning comes once; and every figure of the run's
// spend (its summary, the costs by run, its accruals) is the same number.
#include <cmath>
#include <cstdio>

#include "db/errors.h"
#include "runs_fixture.h"

using namespace runs_test;
namespace db = flotilla::db;
namespace runs = flotilla::runs;

namespace {

const std::string kPriced = "[budget]\nusd_per_hour = 36.0\n";

void report(const char* what, const db::Run& r, double cost) {
  std::printf("%s: %s (%s), cost $%.4f, ran %.2f s\n", what, db::to_string(r.status), r.status_note.c_str(), cost,
              r.ended_at.value_or(0) - r.started_at.value_or(0));
}

void stops_at_max_usd(db::Writer& writer, const std::string& dir) {
  Started s = create_and_start(writer, dir, tiny_config(1000000, kPriced + "max_usd = 0.02\n", 1000000), "max-usd");
  CHECK(s.run.price.usd_per_hour == 36.0);
  Watcher w(&writer, s.watch);
  CHECK(w.wait(120));
  CHECK(w.outcome().exit_code == 10);
  const db::Run r = stored(writer.path(), s.run.run_id);
  const db::Database d(writer.path());
  const double cost = db::run_cost_usd(d, r.id);
  report("max_usd 0.02 at $36/h", r, cost);
  CHECK(r.status == db::RunStatus::kStopped);
  CHECK_MSG(
      r.status_note.rfind("budget reached: $0.02", 0) == 0 && r.status_note.find(" of $0.02") != std::string::npos,
      "note: %s", r.status_note.c_str());
  CHECK(r.usd_per_hour && *r.usd_per_hour == 36.0);
  CHECK(r.budget_usd && *r.budget_usd == 0.02);
  CHECK(cost >= 0.02);
  // Prompt: the cap is crossed 2 s after the start; the run ended (checkpoint written) soon after.
  const double crossed = *r.started_at + 0.02 / 36.0 * 3600.0;
  CHECK_MSG(*r.ended_at - crossed < 3.0, "ended %.2f s after crossing the cap", *r.ended_at - crossed);
  const auto cps = db::list_checkpoints(d, r.id);
  CHECK(!cps.empty() && cps.back().reason == "budget");  // stopped with a checkpoint
  // Issue 34 #16: the worker says a budget stopped it, not "preempted".
  CHECK_MSG(r.summary_json.find("\"exit\":\"stopped\"") != std::string::npos &&
                r.summary_json.find("\"stop_reason\":\"budget reached: $0.02") != std::string::npos,
            "%s", r.summary_json.c_str());
  // The warning came once, before the stop.
  int warnings = 0;
  for (const db::EventInfo& e : db::list_events(d, r.id))
    warnings += e.kind == "budget" && e.message.find("has spent") != std::string::npos;
  CHECK(warnings == 1);
  // One spend: the summary, the costs page's figure and the accruals agree, and they are the
  // stored price times the running time.
  const db::RunSummary sum = db::run_summary(d, r.id);
  double by_run = -1;
  for (const db::CostLine& l : db::costs_by_run(d))
    if (l.key == r.name) by_run = l.usd;
  CHECK(sum.cost_usd && std::abs(*sum.cost_usd - cost) < 1e-12 && std::abs(by_run - cost) < 1e-12);
  // The seconds are the monotonic clock's (db/costs.h): its readings are taken a few microseconds
  // from the wall times', so they agree with the shown times within a millisecond.
  CHECK_NEAR(cost, (*r.ended_at - *r.started_at) * 36.0 / 3600.0, 1e-5);
}

void stops_at_max_hours(db::Writer& writer, const std::string& dir) {
  // 0.0005 h = 1.8 s of running.
  Started s =
      create_and_start(writer, dir, tiny_config(1000000, kPriced + "max_hours = 0.0005\n", 1000000), "max-hours");
  Watcher w(&writer, s.watch);
  CHECK(w.wait(120));
  const db::Run r = stored(writer.path(), s.run.run_id);
  const db::Database d(writer.path());
  report("max_hours 0.0005", r, db::run_cost_usd(d, r.id));
  CHECK(r.status == db::RunStatus::kStopped);
  CHECK_MSG(
      r.status_note.rfind("time limit reached: ", 0) == 0 && r.status_note.find(" of 0.0005 h") != std::string::npos,
      "note: %s", r.status_note.c_str());
  CHECK(r.max_hours && *r.max_hours == 0.0005);
  const double ran = *r.ended_at - *r.started_at;
  CHECK_MSG(ran >= 1.8 && ran < 1.8 + 3.0, "ran %.2f s for a 1.8 s limit", ran);
}

void the_budget_flag_overrides_max_usd(db::Writer& writer, const std::string& dir) {
  Started s = create_and_start(writer, dir, tiny_config(1000000, kPriced + "max_usd = 100.0\n", 1000000), "flag", 0.01);
  Watcher w(&writer, s.watch);
  CHECK(w.wait(120));
  const db::Run r = stored(writer.path(), s.run.run_id);
  report("--budget 0.01 over max_usd 100", r, db::run_cost_usd(db::Database(writer.path()), r.id));
  CHECK(r.budget_usd && *r.budget_usd == 0.01);
  CHECK(r.status == db::RunStatus::kStopped && r.status_note.find("of $0.01") != std::string::npos);
}

void the_machine_price_is_used_without_a_config_price(db::Writer& writer, const std::string& dir) {
  writer.run([](db::Database& d) {
    db::NodePricing p;
    p.usd_per_hour = 36.0;
    db::set_node_pricing(d, db::ensure_node(d, "local", "local"), p);
  });
  Started s = create_and_start(writer, dir, tiny_config(1000000, "", 1000000), "machine-priced", 0.01);
  CHECK(s.run.price.usd_per_hour == 36.0);
  CHECK_MSG(s.run.price.source.find("flat $36.00/h") != std::string::npos, "%s", s.run.price.source.c_str());
  Watcher w(&writer, s.watch);
  CHECK(w.wait(120));
  const db::Run r = stored(writer.path(), s.run.run_id);
  CHECK(r.status == db::RunStatus::kStopped && r.status_note.rfind("budget reached", 0) == 0);
  // A price edited while a run goes does not change it: the run keeps the price it started with.
  writer.run([](db::Database& d) {
    db::NodePricing p;
    p.usd_per_hour = 0.0;
    db::set_node_pricing(d, db::ensure_node(d, "local", "local"), p);
  });
  CHECK(stored(writer.path(), r.id).usd_per_hour == 36.0);
}

void an_unpriced_budget_is_refused(db::Writer& writer, const std::string& dir) {
  writer.run([](db::Database& d) { db::set_node_pricing(d, db::ensure_node(d, "local", "local"), db::NodePricing{}); });
  runs::NewRunRequest req;
  req.config = config_of(tiny_config(10));
  req.name = "unpriced";
  req.explicit_name = true;
  req.runs_root = dir + "/runs";
  req.budget_usd = 5.0;
  std::string why;
  try {
    runs::create_local_run(writer, req);
  } catch (const db::DbError& e) {
    why = e.what();
  }
  CHECK_MSG(why.find("could never be reached") != std::string::npos &&
                why.find("flotilla pricing node local --usd-per-hour") != std::string::npos &&
                why.find("budget.usd_per_hour") != std::string::npos,
            "%s", why.c_str());
  CHECK(!db::find_run(db::Database(writer.path()), "unpriced"));
  CHECK(!fs::exists(dir + "/runs/unpriced"));
}

}  // namespace

int main() {
  const std::string dir = scratch("budget");
  db::Writer writer(dir + "/store.db");
  stops_at_max_usd(writer, dir);
  stops_at_max_hours(writer, dir);
  the_budget_flag_overrides_max_usd(writer, dir);
  the_machine_price_is_used_without_a_config_price(writer, dir);
  an_unpriced_budget_is_refused(writer, dir);
  return flotilla_test::summary("test_local_budget");
}
