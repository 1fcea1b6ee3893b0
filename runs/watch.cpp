// The budget guard (see watch.h).
#include "runs/watch.h"

namespace flotilla::runs {

db::BudgetStatus BudgetGuard::poll(const db::Database& reader) {
  db::BudgetStatus none;
  if (stopped_) return none;
  const auto now = std::chrono::steady_clock::now();
  if (last_ != std::chrono::steady_clock::time_point{} &&
      now - last_ < std::chrono::duration<double>(period_))
    return none;
  last_ = now;
  db::BudgetStatus b = db::budget_status(reader, run_id_);
  if (b.action == db::BudgetAction::kStop) {
    stopped_ = true;
    return b;
  }
  if (b.action == db::BudgetAction::kWarn && !warned_) {
    warned_ = true;
    return b;
  }
  return none;
}

}  // namespace flotilla::runs
