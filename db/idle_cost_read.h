// What idle machines cost, read from idle_accruals (schema v11) for the scheduler's savings
// figures (runs/savings.h).
//
// Decision: a stop-gap reader of the idle helper's table, kept apart under its own name so the
// merge can point runs/savings.cpp at db/node_power.h's idle_cost_usd() and delete this file; it
// only reads (open intervals are charged up to `now`), it never opens or closes an interval.
#pragma once

#include "db/database.h"

namespace flotilla::db {

// Dollars of every idle_accruals interval up to `now` (0: the present): usd_per_hour × seconds.
double idle_accruals_usd_for_savings(const Database& db, double now = 0);

}  // namespace flotilla::db
