// What every run watcher shares, local or on SSH nodes: the hooks its caller plugs in (the CLI
// prints and maps Ctrl-C to a stop; the app posts to its UI thread and maps buttons), and the
// budget guard that stops a run at its cap or time limit.
//
// Decision: a watcher is one blocking loop on the caller's thread, polling these hooks; it never
// owns a UI or a terminal. The CLI runs it on its main thread, the app on a thread per run, so
// both write exactly the same rows in the same transactions and the status goes through
// run_status.h only. The budget is read from the store (the run's stored price, cap and limit),
// never from the config, so what stops a run is what every page shows.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "db/costs.h"
#include "db/database.h"
#include "engine/train/metrics_reader.h"

namespace flotilla::runs {

using Note = std::function<void(const std::string&)>;

struct WatchHooks {
  Note note;  // what the watcher has to say: a lost connection, a reached budget, a stop
  // Each record as parsed (before it is committed).
  std::function<void(const MetricsRecord&)> on_record;
  // After each commit: the records just stored and the byte offset of the file they end at.
  std::function<void(const std::vector<MetricsRecord>&, uint64_t)> on_committed;
  std::function<bool()> stop_requested;        // polled: true once -> stop with a checkpoint, keep watching
  std::function<bool()> checkpoint_requested;  // polled: true -> a checkpoint now, training goes on
  std::function<bool()> kill_requested;        // polled (local runs): true once -> SIGKILL the worker
  std::function<bool()> leave_requested;       // polled: true -> return kLeft, the run stays running
  // The budget guard's answer when it has one (kWarn once, then kStop once), after note(message):
  // a typed signal for what a desktop tells its user (ui/main/runnotifier.h), not a parsed line.
  std::function<void(const db::BudgetStatus&)> on_budget;
};

inline constexpr int kLeft = -2;  // the watcher gave the run up (left running, still 'running')

// Checks a run's stored spend and running time against its cap and time limit, at most every
// `period_s`. poll() answers kWarn once (spend crossed cap × warn fraction) and kStop once (the
// cap or the limit reached); kNone otherwise, and always kNone for a run with neither.
class BudgetGuard {
 public:
  explicit BudgetGuard(int64_t run_id, double period_s = 0.5) : run_id_(run_id), period_(period_s) {}
  db::BudgetStatus poll(const db::Database& reader);
  bool stopped() const { return stopped_; }

 private:
  int64_t run_id_;
  double period_;
  std::chrono::steady_clock::time_point last_{};
  bool warned_ = false, stopped_ = false;
};

}  // namespace flotilla::runs
