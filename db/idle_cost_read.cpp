// Idle cost reader (see idle_cost_read.h).
#include "db/idle_cost_read.h"

#include <algorithm>

#include "db/sql.h"

namespace flotilla::db {

double idle_accruals_usd_for_savings(const Database& db, double now) {
  if (now <= 0) now = now_seconds();
  Stmt s(db, "SELECT start, end, usd_per_hour FROM idle_accruals");
  double usd = 0;
  while (s.step()) {
    const double start = s.f64(0);
    const double end = s.is_null(1) ? now : std::min(s.f64(1), now);
    usd += s.f64(2) * std::max(0.0, end - start) / 3600.0;
  }
  return usd;
}

}  // namespace flotilla::db
