// How a worker's end reads in the store (runs/run_status.h): the documented exit codes by name, a
// shell's 128 + N status (srun's in a Slurm batch script, when the job's tasks were signalled) as
// the signal, and the status each exit maps to.
#include <cstdio>
#include <string>

#include "engine/core/error.h"
#include "runs/run_status.h"

namespace {
int failures = 0;
void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::printf("FAIL: %s\n", what.c_str());
    ++failures;
  }
}
}  // namespace

int main() {
  using flotilla::runs::exit_name;
  expect(exit_name(7) == "communication failure", "7: " + exit_name(7));
  expect(exit_name(10) == exit_name(static_cast<int>(flotilla::ExitCode::kPreempted)), "10 is preempted");
  expect(exit_name(-1) == "unknown", "-1: " + exit_name(-1));
  expect(exit_name(143) == "killed by signal 15 (Terminated)", "143: " + exit_name(143));
  expect(exit_name(137) == "killed by signal 9 (Killed)", "137: " + exit_name(137));
  expect(exit_name(99) == "unknown", "99 is no code of ours: " + exit_name(99));

  const auto end = flotilla::runs::end_for_exit(143, 0, flotilla::runs::StopCause::kNone, "slurm job 4 NODE_FAIL", "");
  expect(end.status == flotilla::db::RunStatus::kFailed, "143 without a stop request is a failure");
  expect(end.reason.find("NODE_FAIL") != std::string::npos && end.reason.find("killed by signal 15") != std::string::npos,
         "the reason names the job state and the signal: " + end.reason);
  if (failures) return 1;
  std::printf("ok\n");
  return 0;
}
