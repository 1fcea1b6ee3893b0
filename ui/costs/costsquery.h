// The Costs page's reads and writes as plain functions, each on a connection of its own: the page
// runs them in QtConcurrent tasks (never on the UI thread).
//
// Decision: "reset to list prices" clears the user-edited mark and re-seeds from the built-in
// catalogue in one transaction; entries the catalogue does not know (added by the user) keep
// their values and their mark, so a reset never deletes anything the user typed in.
#pragma once

#include <QString>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "db/costs.h"
#include "db/node_power.h"

namespace flotilla::ui {

struct BudgetLine {
  int64_t runId = 0;
  std::string name, status;
  std::optional<double> capUsd;
  double warnFraction = 0.8;
  bool priced = false;  // a price on the run or its time: else spent and projected read "unpriced"
  double spentUsd = 0;
  double projectedUsd = 0;  // spent × planned steps / steps done while running; else spent
};

struct CostsResult {
  std::vector<db::CostLine> byRun, byNode, byDay;
  std::vector<db::PriceEntry> prices;
  std::vector<BudgetLine> budgets;
  double totalUsd = 0;
  // Idle autostop (db/node_power.h): each node's idle time and money, their total (not in totalUsd:
  // no run was charged it), and autostop's events ("stopped by autostop at 03:12 after 30 min idle").
  std::vector<db::CostLine> idleByNode;
  double idleUsd = 0;
  std::vector<db::PowerEvent> autostop;
};

CostsResult loadCosts(const QString& databasePath, double now = 0);
// Inserts or updates one catalogue entry (marked user-edited). Returns its id.
int64_t savePrice(const QString& databasePath, const db::PriceEntry& entry);
// Deletes a user-edited entry; a listed price the user did not edit is refused (DbError kInvalid).
void deletePrice(const QString& databasePath, int64_t priceId);
// See the decision above. Returns the number of entries reset.
int resetPrices(const QString& databasePath);
void saveBudget(const QString& databasePath, int64_t runId, std::optional<double> capUsd,
                double warnFraction);

}  // namespace flotilla::ui
