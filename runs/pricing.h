// A run's price, resolved once when it starts and stored with it, and the limits it runs under.
//
// Decision: one price per run. It is resolved in this order: the run config's budget.usd_per_hour
// (the whole run's hardware), then budget.price_source (a node such as "local", or a catalogue
// entry "provider:item"), then what each of its nodes costs (Settings, `flotilla pricing node`,
// `nodes add --price-per-hour`), then the catalogue entry for the nodes' probed GPU type. The
// result is stored on the run and split over its nodes by devices (costs.h set_run_price), and
// every accrual charges those shares: the Live page, the Runs table, Costs, Compare and every
// command read the same accruals, so a run shows one spend everywhere. A cap on a run nothing
// prices could never be reached: it is refused before anything starts, with the fix named.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "db/costs.h"
#include "db/database.h"
#include "engine/config/run_config.h"

namespace flotilla::runs {

struct RunPrice {
  double usd_per_hour = 0;
  std::string source;                    // in words: "run config: [budget] usd_per_hour = $36/h", ...
  std::vector<db::RunNodeShare> shares;  // one per attached node
  bool priced() const { return usd_per_hour > 0; }
};

// The price of run `run_id` on the nodes attached to it now, as described above. Throws DbError
// (kNotFound) when budget.price_source names neither a node nor a catalogue entry.
RunPrice resolve_run_price(const db::Database& db, int64_t run_id, const RunConfig& config);
// resolve_run_price, then stored (db::set_run_price). Call it when the run starts and whenever
// its nodes change (a recovery replaced one).
RunPrice price_run(db::Database& db, int64_t run_id, const RunConfig& config);

struct RunLimits {
  std::optional<double> max_usd;    // --budget, else budget.max_usd when > 0
  double warn_fraction = 0.8;       // budget.warn_fraction
  std::optional<double> max_hours;  // budget.max_hours when > 0
};
// The limits of a run started from `config`; `budget_usd` (the CLI's --budget) overrides max_usd.
RunLimits limits_of(const RunConfig& config, std::optional<double> budget_usd = std::nullopt);
// Stores the limits on the run (budget_usd, warn fraction, max_hours).
void store_limits(db::Database& db, int64_t run_id, const RunLimits& limits);

// Throws DbError (kInvalid) when `limits` caps spend but `price` is zero, naming what to set:
// budget.usd_per_hour, or the price of the nodes (`flotilla pricing node NAME ...`, Settings).
void check_budget_is_priced(const RunPrice& price, const RunLimits& limits, const std::string& run_name,
                            const std::vector<std::string>& node_names);

}  // namespace flotilla::runs
