// Costs: the seeded catalogue and user edits; accrual split at every status change (pause/resume
// charges running time only), spot vs on-demand and per-GPU shares to the cent; flat and power ×
// tariff local pricing; costs by run, node and UTC day; the budget query.
#include <cmath>
#include <map>
#include <string>

#include "db/costs.h"
#include "db/errors.h"
#include "db/queries.h"
#include "db/run_store.h"
#include "store_fixture.h"

using namespace flotilla::db;
using namespace store_test;

namespace {

double cents(double usd) { return std::round(usd * 100) / 100; }

void test_catalogue(Database& db) {
  CHECK(seed_pricing(db) >= 10);
  const auto p5 = find_price(db, "aws", "p5.48xlarge");
  CHECK(p5 && p5->gpus == 8 && p5->on_demand_usd_per_hour > 0 && !p5->source.empty() && !p5->as_of.empty());
  for (const auto& p : list_pricing(db))
    CHECK_MSG(p.source.rfind("https://", 0) == 0 && p.as_of.size() >= 7, "%s/%s lacks a dated source",
              p.provider.c_str(), p.item.c_str());
  CHECK(seed_pricing(db) == 0);  // idempotent
  PriceEntry edit = *p5;
  edit.spot_usd_per_hour = 40.0;
  set_price(db, edit);
  // A newer seed never overwrites the user's edit, but refreshes untouched rows.
  const std::string newer =
      "[[price]]\nprovider='aws'\nitem='p5.48xlarge'\ngpus=8\non_demand=1.0\nas_of='2099-01'\nsource='x'\n"
      "[[price]]\nprovider='aws'\nitem='g5.xlarge'\ngpus=1\non_demand=2.0\nas_of='2099-01'\nsource='x'\n";
  CHECK(seed_pricing(db, newer) == 1);
  CHECK(find_price(db, "aws", "p5.48xlarge")->spot_usd_per_hour == 40.0);
  CHECK(find_price(db, "aws", "p5.48xlarge")->on_demand_usd_per_hour == p5->on_demand_usd_per_hour);
  CHECK(find_price(db, "aws", "g5.xlarge")->on_demand_usd_per_hour == 2.0);
  CHECK_THROWS(seed_pricing(db, "[[price]]\nprovider='x'\n", "bad.toml"), "bad.toml: [[price]] #1");
  CHECK_THROWS(seed_pricing(db, "[[price]\n", "broken.toml"), "broken.toml:1");
}

void test_accruals(Database& db) {
  PriceEntry gpu{0, "test", "box8", "H100", 8, 16.0, 4.0, "2025-01", "https://example.org", false};
  const int64_t price = set_price(db, gpu);
  const int64_t cloud = ensure_node(db, "cloud-a", "ssh", "H100", 8);
  const int64_t spot = ensure_node(db, "cloud-b", "ssh", "H100", 8);
  set_node_pricing(db, cloud, NodePricing{price, false, {}, {}, {}});
  set_node_pricing(db, spot, NodePricing{price, true, {}, {}, {}});
  CHECK_NEAR(node_rate(db, cloud, 4).usd_per_hour, 8.0, 1e-12);  // 4 of 8 GPUs on demand: $2/GPU-h
  CHECK_NEAR(node_rate(db, spot, 8).usd_per_hour, 4.0, 1e-12);   // the whole box on spot

  const int64_t run = make_run(db, "priced", R"({"run":{"device":"cuda","name":"priced"}})");
  attach_node(db, run, cloud, 4);
  attach_node(db, run, spot, 8);
  const double t0 = 1767225600;  // 2026-01-01T00:00:00Z
  set_status(db, run, RunStatus::kRunning, t0);
  set_status(db, run, RunStatus::kPaused, t0 + 1800);     // 30 min running
  set_status(db, run, RunStatus::kRunning, t0 + 7200);    // 90 min paused: free
  set_status(db, run, RunStatus::kPreempted, t0 + 9000);  // 30 min
  set_status(db, run, RunStatus::kRunning, t0 + 9000 + 60);
  // Still running at "now" = 15 minutes later.
  const double now = t0 + 9060 + 900;
  // running seconds: 1800 + 1800 + 900 = 4500 s = 1.25 h
  // on-demand 4 GPUs: $8/h × 1.25 = $10.00; spot box: $4/h × 1.25 = $5.00
  CHECK(cents(run_cost_usd(db, run, now)) == 15.00);
  const auto accruals = run_accruals(db, run);
  CHECK(accruals.size() == 6);  // 3 running intervals × 2 nodes; paused/preempted have none
  CHECK(!accruals.back().end);
  const RunSummary s = run_summary(db, run, now);
  CHECK_NEAR(s.gpu_hours, 12 * 1.25, 1e-9);
  CHECK(s.on_gpus && std::string(device_hours_unit(s.on_gpus)) == "GPU-h");
  CHECK(s.cost_usd && cents(*s.cost_usd) == 15.00);
  // A later price change does not rewrite history: the open interval keeps its rate.
  gpu.on_demand_usd_per_hour = 1000;
  set_price(db, gpu);
  CHECK(cents(run_cost_usd(db, run, now)) == 15.00);
  set_status(db, run, RunStatus::kCompleted, now);
  CHECK(cents(run_cost_usd(db, run, now + 99999)) == 15.00);  // closed: no more accrual

  double by_node_a = 0, by_node_b = 0;
  for (const auto& l : costs_by_node(db, now)) {
    if (l.key == "cloud-a") by_node_a = l.usd;
    if (l.key == "cloud-b") by_node_b = l.usd;
  }
  CHECK(cents(by_node_a) == 10.00 && cents(by_node_b) == 5.00);
  const auto by_run = costs_by_run(db, now);
  CHECK(by_run.size() == 1 && by_run[0].key == "priced" && cents(by_run[0].usd) == 15.00);
  CHECK(by_run[0].unit == "GPU-h");
}

void test_local_and_days(Database& db) {
  const int64_t flat = ensure_node(db, "desk", "local", "RTX-4090", 2);
  set_node_pricing(db, flat, NodePricing{{}, false, 0.60, {}, {}});
  const int64_t power = ensure_node(db, "lab", "local", "", 0);
  set_node_pricing(db, power, NodePricing{{}, false, {}, 500.0, 0.30});  // 0.5 kW × $0.30 = $0.15/h
  CHECK_NEAR(node_rate(db, flat, 1).usd_per_hour, 0.30, 1e-12);          // one of two GPUs
  CHECK_NEAR(node_rate(db, power, 1).usd_per_hour, 0.15, 1e-12);
  const int64_t run = make_run(db, "overnight");
  attach_node(db, run, flat, 2);
  attach_node(db, run, power, 1);
  const double start = 1767312000 - 3600;  // 2026-01-01 23:00 UTC
  set_status(db, run, RunStatus::kRunning, start);
  set_status(db, run, RunStatus::kCompleted, start + 3 * 3600);  // until 02:00 on the 2nd
  std::map<std::string, double> days;
  std::map<std::string, std::string> units;
  for (const auto& l : costs_by_day(db, start + 10 * 3600)) {
    days[l.key] = l.usd;
    units[l.key] = l.unit;
  }
  // "GPU-hours" is not used for a CPU run (issue 18): its hours are CPU-h, a day with both device-h.
  CHECK(!run_summary(db, run, start + 10 * 3600).on_gpus);
  CHECK(units["2026-01-02"] == "CPU-h");
  CHECK(units["2026-01-01"] == "device-h");
  for (const auto& l : costs_by_run(db, start + 10 * 3600))
    if (l.key == "overnight") CHECK(l.unit == "CPU-h");
  CHECK(!config_on_gpus("{}") && !config_on_gpus("not json") && !config_on_gpus(R"({"run":{"device":"cpu"}})"));
  // 0.75 $/h: 1 h on Jan 1 (plus the other test's run), 2 h on Jan 2.
  CHECK(cents(days["2026-01-02"]) == 1.50);
  CHECK(cents(days["2026-01-01"]) == 15.75);
}

void test_budget(Database& db) {
  const int64_t node = ensure_node(db, "rented", "ssh", "A100", 1);
  set_node_pricing(db, node, NodePricing{{}, false, 2.0, {}, {}});
  const int64_t run = make_run(db, "capped");
  attach_node(db, run, node, 1);
  CHECK(budget_status(db, run, 0).action == BudgetAction::kNone);  // no cap
  set_budget(db, run, 10.0, 0.8);
  const double t = 1767225600;
  set_status(db, run, RunStatus::kRunning, t);
  CHECK(budget_status(db, run, t + 3600).action == BudgetAction::kNone);  // $2
  const BudgetStatus warn = budget_status(db, run, t + 4.1 * 3600);       // $8.20
  CHECK(warn.action == BudgetAction::kWarn && warn.message.find("$8.20 of its $10.00") != std::string::npos);
  const BudgetStatus stop = budget_status(db, run, t + 5 * 3600);  // $10.00
  CHECK(stop.action == BudgetAction::kStop && cents(stop.spent_usd) == 10.00);
  CHECK_THROWS(set_budget(db, run, 10.0, 1.5), "fraction");
}

// Issue 16: one price per run. The price stored when the run starts is what every accrual it
// opens charges, on every node at its share; editing the node's price afterwards changes runs
// started afterwards, not this one; a small budget is reported to the digit it needs.
void test_run_price(Database& db) {
  const int64_t a = ensure_node(db, "share-a", "ssh");
  const int64_t b = ensure_node(db, "share-b", "ssh");
  set_node_pricing(db, a, NodePricing{{}, false, 1.0, {}, {}});
  const int64_t run = make_run(db, "one-price");
  attach_node(db, run, a, 1);
  attach_node(db, run, b, 3);
  set_run_price(db, run, 36.0, "run config ([budget] usd_per_hour)",
                {{a, "", 1, 9.0, "config share 1/4"}, {b, "", 3, 27.0, "config share 3/4"}});
  const Run r = get_run(db, run);
  CHECK(r.usd_per_hour && *r.usd_per_hour == 36.0 && r.price_source == "run config ([budget] usd_per_hour)");
  const auto shares = run_node_shares(db, run);
  CHECK(shares.size() == 2 && shares[0].usd_per_hour == 9.0 && shares[1].usd_per_hour == 27.0);
  const double t = 1767225600;
  set_status(db, run, RunStatus::kRunning, t);
  set_node_pricing(db, a, NodePricing{{}, false, 100.0, {}, {}});  // edited while it runs
  set_status(db, run, RunStatus::kPaused, t + 1);
  set_status(db, run, RunStatus::kRunning, t + 10);
  // 1 s + 1 s of running at $36/h, whatever node a costs now: a cent a second.
  CHECK_NEAR(run_cost_usd(db, run, t + 11), 0.02, 1e-12);
  for (const Accrual& acc : run_accruals(db, run)) CHECK(acc.usd_per_hour == (acc.node_id == a ? 9.0 : 27.0));
  // Running time counts once however many nodes accrue: 2 s, not 4.
  CHECK_NEAR(run_running_seconds(db, run, t + 11), 2.0, 1e-9);
  set_budget(db, run, 0.02, 0.8);
  const BudgetStatus at = budget_status(db, run, t + 11.01);
  CHECK(at.action == BudgetAction::kStop);
  CHECK_MSG(at.note == "budget reached: $0.0201 of $0.02", "note: %s", at.note.c_str());
  CHECK_THROWS(set_run_price(db, run, -1, "x", {}), "price");
  // A run whose price was never stored (before schema v7) still accrues at the node's rate now.
  const int64_t old = make_run(db, "unresolved");
  attach_node(db, old, a, 1);
  set_status(db, old, RunStatus::kRunning, t);
  CHECK_NEAR(run_cost_usd(db, old, t + 36), 1.0, 1e-9);  // $100/h for 36 s
}

void test_time_limit(Database& db) {
  const int64_t run = make_run(db, "timed");
  attach_node(db, run, ensure_node(db, "local", "local"), 1);
  set_max_hours(db, run, 0.002);  // 7.2 s
  const double t = 1767225600;
  set_status(db, run, RunStatus::kRunning, t);
  CHECK(budget_status(db, run, t + 7).action == BudgetAction::kNone);
  const BudgetStatus stop = budget_status(db, run, t + 7.3);
  CHECK(stop.action == BudgetAction::kStop);
  CHECK_MSG(stop.note == "time limit reached: 0.002028 h of 0.002 h", "note: %s", stop.note.c_str());
  CHECK_THROWS(set_max_hours(db, run, 0.0), "max_hours");
  set_status(db, run, RunStatus::kStopped, t + 8, "flotilla run: time limit", 10, stop.note);
  CHECK(get_run(db, run).status_note == stop.note);
  set_status(db, run, RunStatus::kRunning, t + 20);  // resumed: the note is cleared
  CHECK(get_run(db, run).status_note.empty());
}

}  // namespace

int main() {
  const fs::path dir = scratch("db_costs", "all");
  Database db((dir / "costs.db").string());
  test_catalogue(db);
  test_accruals(db);
  test_local_and_days(db);
  test_budget(db);
  test_run_price(db);
  test_time_limit(db);
  return flotilla_test::summary("test_costs");
}
