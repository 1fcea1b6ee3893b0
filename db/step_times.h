// The record times of a run's latest steps, newest first: what the runs layer's pace ("time left",
// runs/run_speed.h) is measured on.
//
// Decision: read from the metrics table's "loss" rows (one per step record, primary key
// (run, name, step)), so the read is one index range of at most `limit` rows however long the run.
#pragma once

#include <cstdint>
#include <vector>

#include "db/database.h"

namespace flotilla::db {

struct StepTime {
  int64_t step = 0;
  double time = 0;  // the record's time, Unix seconds
};

// At most `limit` of the run's latest steps, newest first.
std::vector<StepTime> latest_step_times(const Database& db, int64_t run_id, int limit);

}  // namespace flotilla::db
