// TEMPORARY stand-ins for runs service answers the core engineer is adding (/work/notes/32-ui.md,
// "Requests to the core engineer"); each one goes when the service answers it itself.
#pragma once

#include <QString>

#include "db/run_store.h"
#include "runs/placement.h"
#include "runs/service.h"

namespace flotilla::ui::compat {

runs::Placement placementOf(const db::Run& run);          // RunService::placement_of
QString commandLine(const runs::ActiveRun& run);          // ActiveRun::command_line
qint64 localPid(const runs::ActiveRun& run);              // ActiveRun::local_pid
QString jobId(const runs::ActiveRun& run);                // ActiveRun::job_id
QString checkpointRefusal(const runs::Placement& where);  // the place's answer before the run exists

}  // namespace flotilla::ui::compat
