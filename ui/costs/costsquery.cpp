// Costs reads and writes (see costsquery.h).
#include "ui/costs/costsquery.h"

#include <cstdlib>
#include <map>

#include "db/errors.h"
#include "db/queries.h"
#include "db/run_store.h"
#include "db/sql.h"

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
  if (now <= 0) now = db::now_seconds();
  CostsResult out;
  out.byRun = db::costs_by_run(db, now);
  out.byNode = db::costs_by_node(db, now);
  out.byDay = db::costs_by_day(db, now);
  out.prices = db::list_pricing(db);
  for (const auto& l : out.byRun) out.totalUsd += l.usd;
  db::RunFilter filter;
  filter.sort = db::RunFilter::Sort::kCreated;
  for (const auto& item : db::list_runs(db, filter)) {
    BudgetLine b;
    b.runId = item.run.id;
    b.name = item.run.name;
    b.status = db::to_string(item.run.status);
    b.capUsd = item.run.budget_usd;
    b.warnFraction = item.run.budget_warn_fraction;
    b.spentUsd = db::run_cost_usd(db, item.run.id, now);
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
  db::write_tx(db, [&] {
    db::Stmt st(db, "DELETE FROM pricing WHERE id = ?1 AND user_edited = 1");
    st.bind(1, priceId).run();
    if (db::changes_count(db) != 1)
      throw db::DbError(db::DbErrorKind::kInvalid,
                        "only entries you added or edited can be deleted; list prices stay (price id " +
                            std::to_string(priceId) + ")");
  });
}

int resetPrices(const QString& databasePath) {
  db::Database db(databasePath.toStdString(), existingStore());
  int reset = 0;
  db::write_tx(db, [&] {
    std::map<int64_t, std::string> edited;  // id -> as_of before the reset
    for (const auto& p : db::list_pricing(db))
      if (p.user_edited) edited[p.id] = p.as_of;
    // An impossible as_of makes the seed refresh every listed row; rows it does not know keep it.
    db::Stmt clear(db, "UPDATE pricing SET user_edited = 0, as_of = '\x01reset' WHERE user_edited = 1");
    clear.run();
    db::seed_pricing(db);
    db::Stmt restore(db, "UPDATE pricing SET user_edited = 1, as_of = ?2 WHERE id = ?1 AND as_of = '\x01reset'");
    for (const auto& [id, asOf] : edited) {
      restore.bind(1, id).bind(2, asOf).run();
      if (db::changes_count(db) == 0) ++reset;
      restore.reset();
    }
  });
  return reset;
}

void saveBudget(const QString& databasePath, int64_t runId, std::optional<double> capUsd, double warnFraction) {
  db::Database db(databasePath.toStdString(), existingStore());
  db::set_budget(db, runId, capUsd, warnFraction);
}

}  // namespace flotilla::ui
