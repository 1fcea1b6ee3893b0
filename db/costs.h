// Costs: the pricing catalogue, what a node costs per hour, accruals per run and node, budgets.
//
// Decision: an accrual row is one interval of one run on one node in one status, with the rate
// resolved when the interval opened (so editing a price never rewrites history). set_status()
// closes the open rows and, when the new status is running, opens new ones, in the same
// transaction: the split happens at every status change and only running time is charged.
// Amounts are computed when read (rate × seconds / 3600), an open row up to `now`.
//
// Decision (issue 33, D6): an interval's seconds come from the monotonic clock
// (engine/core/clock.h): each row stores CLOCK_BOOTTIME when it opened and closed and its boot id,
// so a wall-clock step changes no cost, running time or limit. Wall times are kept for display and
// for naming days. A row without readings (an older store, a remote start time) or from another
// boot is charged by its wall times, clamped at 0. Every `now` below is a wall time, 0 meaning
// "the present", measured monotonically (callers pass 0 unless they ask about a past moment).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "db/database.h"
#include "db/run_store.h"

namespace flotilla::db {

struct PriceEntry {
  int64_t id = 0;
  std::string provider, item, gpu_type;
  int64_t gpus = 1;  // GPUs per instance (the price is for the whole instance)
  double on_demand_usd_per_hour = 0;
  std::optional<double> spot_usd_per_hour;
  std::string as_of, source;
  bool user_edited = false;
};

// resources/pricing.toml as built into this binary.
const std::string& builtin_pricing_toml();
// Adds catalogue rows from TOML ([[price]] tables: provider, item, gpu_type, gpus, on_demand,
// spot, as_of, source). Rows the user edited are never overwritten; others are refreshed when the
// seed's as_of differs. Returns the number of rows added or refreshed. Throws DbError(kInvalid)
// naming the entry on a malformed file.
int seed_pricing(Database& db, const std::string& toml_text = builtin_pricing_toml(),
                 const std::string& source_name = "pricing.toml");
std::vector<PriceEntry> list_pricing(const Database& db);
std::optional<PriceEntry> find_price(const Database& db, const std::string& provider,
                                     const std::string& item);
// A user edit (insert or update); marks the row user_edited so seeding leaves it alone.
int64_t set_price(Database& db, const PriceEntry& entry);

// How a node is charged: a catalogue entry (spot or on-demand), or a flat $/hour for the whole
// node, or power × tariff. With none set, the node costs nothing.
struct NodePricing {
  std::optional<int64_t> pricing_id;
  bool spot = false;
  std::optional<double> usd_per_hour;
  std::optional<double> power_w;
  std::optional<double> tariff_usd_per_kwh;
};
void set_node_pricing(Database& db, int64_t node_id, const NodePricing& pricing);
std::optional<NodePricing> node_pricing(const Database& db, int64_t node_id);

struct Rate {
  double usd_per_hour = 0;
  std::string source;  // e.g. "aws/p5.48xlarge spot × 4/8 GPUs", "flat $1.20/h", "350 W × $0.30/kWh"
};
// The rate of `devices` devices of the node: a catalogue price per GPU × devices; a flat or power
// rate × devices / gpu_count (the whole node when gpu_count is 0).
Rate node_rate(const Database& db, int64_t node_id, int64_t devices);

// A node a run uses, with its share of the run's price as stored when the run started
// (nullopt: none stored; accruals then use node_rate() at the time they open).
struct RunNodeShare {
  int64_t node_id = 0;
  std::string node_name;
  int64_t devices = 0;
  std::optional<double> usd_per_hour;
  std::string rate_source;
};
std::vector<RunNodeShare> run_node_shares(const Database& db, int64_t run_id);

// Stores the run's price: the total $/hour and its source on the run, and one share per attached
// node (by node id; a node not listed keeps what it had). Accruals opened from now on are charged
// at these shares, so a later price edit changes runs started afterwards, never a running one.
void set_run_price(Database& db, int64_t run_id, double usd_per_hour, const std::string& source,
                   const std::vector<RunNodeShare>& shares);

// Called by set_status(): closes the run's open accruals at `at`; opens one per attached node
// when `to` is running, at the node's stored share (else its node_rate() now). `at_boot` is the
// CLOCK_BOOTTIME reading at `at` (0: unknown; a close then takes the wall difference clamped to
// [0, what the boot clock saw], an open stores no reading).
void split_accruals(Database& db, int64_t run_id, RunStatus to, double at, double at_boot = 0);

struct Accrual {
  int64_t run_id = 0, node_id = 0;  // node_id 0: a Slurm run's accrual on its cluster (cluster_accruals)
  std::string status;
  double start = 0;
  std::optional<double> end;  // open while running
  int64_t devices = 0;
  double usd_per_hour = 0;
  std::string rate_source;
  // Monotonic readings (see the decision above): CLOCK_BOOTTIME at open and close, and the boot.
  std::optional<double> start_boot, end_boot;
  std::string boot_id;
  // Evaluated up to min(end, now); now 0: the present (monotonic when the row has readings).
  double seconds(double now) const;
  double usd(double now) const { return usd_per_hour * seconds(now) / 3600.0; }
  double gpu_hours(double now) const { return static_cast<double>(devices) * seconds(now) / 3600.0; }
};
std::vector<Accrual> run_accruals(const Database& db, int64_t run_id);

// Cumulative dollars (or GPU-hours) of these accruals from their start up to time t.
double accrued_until(const std::vector<Accrual>& accruals, double t, bool dollars);

// Whether a run's config (its stored JSON) trains on GPUs (run.device = "cuda"). Its device-hours
// are then GPU-hours; a CPU run's count its ranks (a Slurm CPU job: its nodes) and read "CPU-h".
bool config_on_gpus(const std::string& config_json);
// "GPU-h" or "CPU-h".
const char* device_hours_unit(bool on_gpus);

struct CostLine {
  std::string key;  // run name, node name, or UTC day YYYY-MM-DD
  double usd = 0;
  bool priced = false;   // any of its intervals had a price: else usd is unknown ("unpriced"), not 0
  double gpu_hours = 0;  // device-hours: running time × devices, GPU-hours for GPU runs (see unit)
  std::string unit;      // "GPU-h", "CPU-h", or "device-h" for a node or day with both kinds
  double running_s = 0;  // running time: the union of its intervals (overlapping nodes count once)
  double hours = 0;      // running_s in hours
};
std::vector<CostLine> costs_by_run(const Database& db, double now = 0);
std::vector<CostLine> costs_by_node(const Database& db, double now = 0);
std::vector<CostLine> costs_by_day(const Database& db, double now = 0);
double run_cost_usd(const Database& db, int64_t run_id, double now = 0);
// Seconds the run has been running up to `now` (the union of its accrual intervals, so several
// nodes' intervals count once): what budget.max_hours caps.
double run_running_seconds(const Database& db, int64_t run_id, double now = 0);
// Running seconds of these accruals up to time t (0: the present), overlapping intervals once.
double running_until(const std::vector<Accrual>& accruals, double t);
// Whether any of these accruals is charged at a price (> $0/h): else their dollars are unknown.
bool any_priced(const std::vector<Accrual>& accruals);

enum class BudgetAction { kNone, kWarn, kStop };
struct BudgetStatus {
  std::optional<double> cap_usd;
  double warn_at_usd = 0;
  double spent_usd = 0;
  std::optional<double> max_hours;
  double running_hours = 0;
  BudgetAction action = BudgetAction::kNone;
  std::string message;  // for the user, "" when kNone
  // For the run's status: "budget reached: $0.0201 of $0.02" or "time limit reached: 0.0021 h of
  // 0.002 h" when kStop, else "".
  std::string note;
};
// What the watcher should do now: warn once spent ≥ cap × warn fraction; stop (with a checkpoint)
// at the cap or once the run has been running max_hours. kNone without a cap or a limit.
BudgetStatus budget_status(const Database& db, int64_t run_id, double now = 0);

// Deletes a catalogue entry the user added or edited (list prices stay): DbError(kInvalid) otherwise.
void delete_user_price(Database& db, int64_t price_id);
// Puts every edited catalogue entry back to the built-in seed's values (entries the seed does not
// know keep the user's values and flag). Returns how many entries were reset.
int reset_user_prices(Database& db);

}  // namespace flotilla::db

namespace flotilla::db {
// Seeds the catalogue from the built-in pricing.toml when this build's seed differs from the one
// last applied (meta 'pricing_seed'), so opening a store normally writes nothing.
void ensure_pricing_seeded(Database& db);
}  // namespace flotilla::db
