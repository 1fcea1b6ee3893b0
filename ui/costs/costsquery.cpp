// Costs reads and writes (see costsquery.h).
#include "ui/costs/costsquery.h"

#include <cstdlib>

#include "db/costs.h"
#include "db/errors.h"
#include "db/queries.h"
#include "db/run_store.h"

namespace flotilla::ui {
namespace {

db::OpenOptions existingStore() {
  db::OpenOptions o;
  o.create = false;
  o.quick_check = false;  // the app checked the file when it opened the workspace
  return o;
}

double plannedSteps(const db::Run& run) {
  for (const auto& [key, value] : db::flatten_config(run.config_json))
    if (key == "train.steps") return std::strtod(value.c_str(), nullptr);
  return 0;
}

}  // namespace

CostsResult loadCosts(const QString& databasePath, double now) {
  const db::Database db(databasePath.toStdString(), existingStore());
  // Costs "now" (0) are measured by the monotonic clock (db/costs.h); `now` stays a wall time below.
  const double costs_at = now;
  if (now <= 0) now = db::now_seconds();
  CostsResult out;
  out.byRun = db::costs_by_run(db, costs_at);
  out.byNode = db::costs_by_node(db, costs_at);
  out.byDay = db::costs_by_day(db, costs_at);
  out.prices = db::list_pricing(db);
  for (const auto& l : out.byRun) out.totalUsd += l.usd;
  out.idleByNode = db::idle_costs_by_node(db, 0, costs_at);
  out.idleUsd = db::idle_cost_usd(db, 0, costs_at);
  out.autostop = db::power_events(db);
  db::RunFilter filter;
  filter.sort = db::RunFilter::Sort::kCreated;
  for (const auto& item : db::list_runs(db, filter)) {
    BudgetLine b;
    b.runId = item.run.id;
    b.name = item.run.name;
    b.status = db::to_string(item.run.status);
    b.capUsd = item.run.budget_usd;
    b.warnFraction = item.run.budget_warn_fraction;
    const std::vector<db::Accrual> accruals = db::run_accruals(db, item.run.id);
    b.priced = db::any_priced(accruals) || item.run.usd_per_hour.value_or(0) > 0;
    b.spentUsd = db::accrued_until(accruals, costs_at, true);
    b.projectedUsd = b.spentUsd;
    const double planned = plannedSteps(item.run);
    if (item.run.status == db::RunStatus::kRunning && item.last_step > 0 &&
        planned > static_cast<double>(item.last_step))
      b.projectedUsd = b.spentUsd * planned / static_cast<double>(item.last_step);
    out.budgets.push_back(std::move(b));
  }
  return out;
}

int64_t savePrice(const QString& databasePath, const db::PriceEntry& entry) {
  db::Database db(databasePath.toStdString(), existingStore());
  return db::set_price(db, entry);
}

void deletePrice(const QString& databasePath, int64_t priceId) {
  db::Database db(databasePath.toStdString(), existingStore());
  db::delete_user_price(db, priceId);
}

int resetPrices(const QString& databasePath) {
  db::Database db(databasePath.toStdString(), existingStore());
  return db::reset_user_prices(db);
}

void saveBudget(const QString& databasePath, int64_t runId, std::optional<double> capUsd,
                double warnFraction) {
  db::Database db(databasePath.toStdString(), existingStore());
  db::set_budget(db, runId, capUsd, warnFraction);
}

}  // namespace flotilla::ui
