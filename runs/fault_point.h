// Where a test may kill the scheduler (issue 37's exactly-once test): FLOTILLA_SCHED_CRASH_AT=POINT
// or POINT:N (the Nth time POINT is reached in this process, from 1) -> _exit(137) right there, as
// a SIGKILL would leave things. Points: after-claim, after-create (RunService::start: the run's row
// exists, its worker not started), after-start, after-record, after-running, after-end. Unset: a
// no-op (one getenv).
#pragma once

namespace flotilla::runs {

void scheduler_fault_point(const char* point);

}  // namespace flotilla::runs
