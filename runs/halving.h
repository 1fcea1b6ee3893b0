// Successive halving for a sweep's runs, asynchronous (ASHA: Li et al., "A System for Massively
// Parallel Hyperparameter Tuning", MLSys 2020, arXiv:1810.05934), as early stopping.
//
// Decision: rungs are fixed token budgets (each run's stored cumulative `tokens` metric, so runs
// with different batch sizes or a resume on another layout compare at the same amount of data).
// A run's loss at a rung is its first validation loss at or after the rung. Nothing waits for a
// rung to fill: when a run reaches a rung it is compared with the runs that reached it before it
// (by the wall time of their loss there, then run id) and itself; it continues when it is among
// the best ceil(n/eta) of those n (ties share the better place; fewer than eta runs: it continues),
// else it is stopped with a checkpoint. Rounding up stops a run only when it is surely outside the
// best 1/eta. The decision for a run depends only on what reached the rung before it, so it is
// the same on every tick and after a restart: the store is the only state, and the tick records
// an event of kind "halving" on a run it stops, which is what keeps a run from being stopped twice.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "db/database.h"

namespace flotilla::runs {

struct HalvingSettings {
  int eta = 2;                 // keep the best 1/eta at each rung
  std::vector<int64_t> rungs;  // token budgets, increasing (empty: halving off)
  bool auto_rungs = false;     // rungs were derived from the runs' total tokens
  bool on() const { return !rungs.empty(); }
};

// {"eta":2,"rungs":[4096,16384],"auto":false}; "{}" when off.
std::string halving_json(const HalvingSettings& settings);
HalvingSettings parse_halving_json(const std::string& text);

// --halving auto: total/eta^k for k = 3, 2, 1 (increasing), each at least `min_tokens` (one
// evaluation interval's tokens), duplicates dropped.
std::vector<int64_t> auto_rungs(int64_t total_tokens, int eta, int64_t min_tokens = 1);

// "4.1k tokens", "16.4k tokens", "1.2M tokens".
std::string tokens_words(double tokens);

// One run's standing at one rung.
struct RungStanding {
  int64_t rung = 0;   // tokens
  double tokens = 0;  // where its loss was measured
  double val_loss = 0;
  double time = 0;  // when (wall time)
  int place = 0;    // 1-based among the runs that had reached the rung by then (itself included)
  int of = 0;       // how many had
  int keep = 0;     // ceil(of/eta) (0 when of < eta: too few to compare)
  bool continues = true;
};

struct RunHalving {
  int64_t run_id = 0;
  std::vector<RungStanding> rungs;  // the rungs it reached, in order
  std::optional<size_t> stop_at;    // index into rungs of the first where it falls out
  std::string why;                  // the words of that stop ("" none)
};

// Every run of the group's standing (runs with no val loss at a rung have no standing there).
std::vector<RunHalving> halving_standings(const db::Database& db, const std::string& group,
                                          const HalvingSettings& settings, double now);

struct HalvingStop {
  int64_t run_id = 0;
  std::string why;  // "stopped by successive halving at 4.1k tokens: val loss 3.21, 4th of 6 at
                    // this rung (keeps the best 3)"
};

// The runs of sweep `group` to stop now: running, past a rung where they fall out, and not already
// stopped by halving (no "halving" event). Only values stored at or before `now` count. Empty when
// the group is no sweep or its halving is off.
std::vector<HalvingStop> halving_decisions(const db::Database& db, const std::string& group, double now);

// The tick hook's work (the lead wraps it as a Scheduler tick hook, with stop = Scheduler::stop_run):
// for every sweep with halving on, each decision is recorded as an event of kind "halving" on the
// run (level info, the words as its message) and then `stop(run_id, why)` is called; a run with
// that event is never stopped again. A stop that throws is recorded as a warning event.
using StopRunFn = std::function<void(int64_t run_id, const std::string& why)>;
void halving_tick(const StopRunFn& stop, db::Database& db, double now);

// The halving event's message on a run ("" when halving never stopped it).
std::string halving_reason(const db::Database& db, int64_t run_id);

}  // namespace flotilla::runs
