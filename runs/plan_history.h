// The planner's view of the store: earlier runs on this machine with their measured step times,
// handed to the engine's calibration (engine/plan/calibration.h), which never reads the store.
//
// Decision: a run's measured step time is the median of its stored step_ms over every step but
// its first (the warm-up), so a checkpoint or evaluation that stalled one step does not move it; only
// runs on this machine (target "local") count, since the planner calibrates this machine.
#pragma once

#include <vector>

#include "db/database.h"
#include "db/run_store.h"
#include "engine/config/run_config.h"
#include "engine/plan/calibration.h"

namespace flotilla::runs {

inline constexpr int kPlanHistoryRuns = 50;  // newest local runs read (each one's step_ms series)

// Local runs with a readable stored config and at least two timed steps, newest first, at most
// `limit`; when `like` is given only those comparable to it (comparable_runs). Runs whose stored
// config no longer parses (an older engine's keys) are skipped.
std::vector<RunObservation> plan_history(const db::Database& db, const RunConfig* like = nullptr,
                                         int limit = kPlanHistoryRuns);

// A stored run's config: its TOML, else the config_json of its run_start record (a run started from
// the built-in demo stores no TOML). Throws flotilla::Error(kConfig) when neither parses.
RunConfig stored_run_config(const db::Run& run);

// machine_calibration (the kept peak and link figures; measured when absent and `measure_if_absent`)
// with the store's history of local runs (plan_calibrated picks what it learns from).
Calibration store_calibration(const db::Database& db, const RunConfig& config, bool measure_if_absent);

}  // namespace flotilla::runs
