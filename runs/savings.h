// What the scheduler saved (issue 37 item 6): for each run it started, the money against the same
// run started on the most expensive fitting place and on the first free place, and what
// preemptions and idle machines cost. One function for the app's Costs page and `flotilla costs
// --savings`, so both print the same figures (docs/scheduling.md "Savings").
//
// Decision: the counterfactuals are the scheduler's own predictions, read back from the decision
// JSON it stored on the entry (queue_entries.decision: every place's predicted usd, seconds, wait),
// each scaled by how far this run's prediction was off on the place it really ran: the measured
// cost over the predicted cost on the chosen place, or (when that place was predicted free: this
// machine with no price) the measured running time over the predicted running time. The measured
// cost is db/costs.h's run_cost_usd (summed over the run and the runs it resumed), never
// recomputed. Only finished entries count: a running run's cost so far would flatter it.
// "First free" is the first fitting place in the decision's order with a known wait of 0 (what
// starting at once on whatever was free would have done; a null wait_s, unknown, is not free); "most
// expensive" is the fitting place with the highest predicted cost. A place without a price (null usd) is
// never a counterfactual.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "db/database.h"

namespace flotilla::runs {

struct RunSavings {
  int64_t entry_id = 0;
  int64_t run_id = 0;
  std::string run;     // the run's name
  std::string chosen;  // place keys ("" when the decision names none)
  std::string most_expensive;
  std::string first_free;
  std::optional<double> predicted_usd;       // on the chosen place, as decided
  double scale = 1;                          // measured / predicted (see the decision above)
  std::string scale_basis;                   // "cost", "time" or "none"
  std::optional<double> measured_usd;        // nullopt: unpriced (then nothing is saved or lost)
  bool measured_priced = true;               // false: this machine without a price, counted as $0
  std::optional<double> most_expensive_usd;  // predicted there, scaled
  std::optional<double> first_free_usd;      // predicted there, scaled
  std::optional<double> saved_vs_most_expensive;
  std::optional<double> saved_vs_first_free;
  double lost_usd = 0;  // preemptions' lost work (queue entry)
  int64_t lost_steps = 0;
  int64_t restarts = 0;  // starts beyond the first
};

struct Savings {
  std::vector<RunSavings> runs;  // finished entries with a run, oldest entry first
  double measured_usd = 0;       // the counted runs' measured cost
  double saved_vs_most_expensive = 0;
  int counted_vs_most_expensive = 0;
  double saved_vs_first_free = 0;
  int counted_vs_first_free = 0;
  double preemption_usd = 0;  // every entry's lost_usd, finished or not
  int64_t preemption_steps = 0;
  int64_t restarts = 0;
  double idle_usd = 0;  // idle_accruals up to now
  int unfinished = 0;   // started by the scheduler and not finished: not counted yet
};

// Reads the queue, the decisions, the measured costs and the idle accruals (now 0: the present).
Savings scheduler_savings(const db::Database& db, double now = 0);

// The same figures in words, one paragraph ("Scheduler savings on 3 runs: ...").
std::string savings_summary(const Savings& savings);
// The per-run table: column titles and each row's cells, written once for the app and the CLI.
std::vector<std::string> savings_columns();
std::vector<std::string> savings_cells(const RunSavings& run);
// For `flotilla costs --savings --json`.
std::string savings_json(const Savings& savings);

}  // namespace flotilla::runs
