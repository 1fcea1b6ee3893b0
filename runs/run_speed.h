// A run's speed as one figure: its tokens/s and MFU over the whole run, the same on every page
// and command (the Runs table, the Live header of an ended run, `flotilla runs show`).
//
// Decision: the rule is the worker's own summary rule (engine/train/trainer.cpp): the mean of the
// steps' figures with the first step left out when there are others (its time holds the warm-up
// and first allocations). An ended run that wrote a summary record shows the summary's figures;
// a run still going (or one that ended without a summary) gets the same mean over its stored
// steps. The last step's figure is never shown as the run's.
#pragma once

#include <cstdint>

#include "db/database.h"
#include "db/queries.h"
#include "db/run_store.h"

namespace flotilla::runs {

struct RunSpeed {
  double tokens_per_s = 0;  // 0: not known yet
  double mfu = 0;           // fraction of peak; 0: not known
  int64_t steps = 0;        // the steps the mean is over (0 for a summary's figures)
  bool from_summary = false;
};

// Accumulates the rule over steps as they arrive (the app's live runs use it for their records).
class SpeedMean {
 public:
  void add(int64_t step, double tokens_per_s, double mfu);
  RunSpeed value() const;

 private:
  double first_tps_ = 0, first_mfu_ = 0, tps_sum_ = 0, mfu_sum_ = 0;
  int64_t count_ = 0;  // steps after the first
  bool have_first_ = false;
  // A counted step without an MFU (0 or null: the worker stops reporting it once a step beats the
  // ceiling, which is then wrong for the whole run): the mean is not known either, as the summary's.
  bool mfu_unknown_ = false;
};

// The run's speed from the store: its summary's means, else SpeedMean over its stored step rows.
RunSpeed run_speed(const db::Database& db, const db::Run& run);

// db::run_summary with tokens/s and MFU by run_speed's rule (db's own figures are plain means of
// every stored step, warm-up included). Every page and command that shows a run's summary reads it
// from here, so `runs show`, `compare`, the Compare page and the Runs table agree.
db::RunSummary run_summary(const db::Database& db, int64_t run_id, double now = 0);

// The run's pace as measured, for "time left": wall-clock seconds per step over its last `window`
// stored steps (the record times, so evals and checkpoints count as the user waits for them).
// The window stops at a pause (a gap over 30 s and ten times the pace so far: the run was stopped
// and resumed), so a resumed run is timed by its current session. 0 with fewer than two steps.
double measured_seconds_per_step(const db::Database& db, int64_t run_id, int window = 50);

// Seconds until step `planned` at `seconds_per_step` from step `last`; -1 when unknown (no pace,
// no plan) and 0 once there.
double remaining_seconds(int64_t planned, int64_t last, double seconds_per_step);

}  // namespace flotilla::runs
