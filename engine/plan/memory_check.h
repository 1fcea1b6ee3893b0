// The memory check `train` makes before it allocates anything (issue 19, defect 2).
#pragma once

#include "engine/config/run_config.h"

namespace flotilla {

// Plans `config` on this CPU and throws Error(kOutOfMemory) with the planner's memory breakdown
// when the ranks on this machine (`local_ranks` of them share its memory) need more than this
// process can use (usable_memory(): MemAvailable, the cgroup limit, RLIMIT_AS). The message names
// the override (train --ignore-memory-limit). Runs on the GPU (run.device = "cuda") are checked
// by the device model against the GPU's memory instead, so this only checks CPU runs.
void check_run_fits_memory(const RunConfig& config, int local_ranks);

}  // namespace flotilla
