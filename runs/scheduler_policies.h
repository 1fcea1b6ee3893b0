// The scheduler's policies as every front end wires them (`flotilla queue serve` and the app):
// successive halving of sweeps (runs/halving.h) and idle autostop of rented nodes
// (runs/autostop.h), both as tick hooks, and the wake of a stopped node before a start there.
//
// Decision: one function adds them, so the CLI and the app schedule by the same rules; what
// differs is only where an autostop notice goes (printed, or a notification). Both hooks run on
// the scheduler's tick thread, which IdleAutostop needs (it is not thread-safe). The work view that
// autostop reads is built from the queue itself: the nodes of entries starting or running are
// busy; the nodes a queued entry may go to (its --on places, else the place its last decision
// chose or waits for) are wanted, so their idle clock rests while work waits for them.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "db/database.h"
#include "runs/autostop.h"
#include "runs/scheduler.h"

namespace flotilla::runs {

// Busy and wanted nodes of the queue as it is now (see above).
WorkView queue_work_view(const db::Database& db);

// Adds successive halving and idle autostop to `options` (tick_hooks, wake_node). Autostop's
// command logs go to `autostop_log_dir` ("": none); `notify` gets each autostop notice on the tick
// thread (may be empty). Returns the autostop object the hooks share (kept alive by them too).
std::shared_ptr<IdleAutostop> add_standard_policies(SchedulerOptions& options,
                                                    const std::string& autostop_log_dir,
                                                    std::function<void(const AutostopNotice&)> notify);

}  // namespace flotilla::runs
