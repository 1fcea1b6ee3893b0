// A run on this machine from start to end, for the CLI and the app alike: start the worker,
// watch it (its metrics into the store by byte offset, its budget, the stop, checkpoint and kill
// requests), re-attach to one left running, and record how it ended.
//
// Decision: the worker is watched through its files, never its pipes. Its metrics are read from
// <run dir>/metrics.jsonl by the offset committed with the rows (source "metrics.jsonl"), so a
// watcher that dies, a store that was full for a while, or an app that restarts continues exactly
// after the last stored line; launch's own reports (the root cause of a failed rank) are read from
// worker.log. The exit code comes from waitpid() when the worker is our child; a re-attached
// worker (found by pid and start time) ends as its summary record says. The end is recorded once,
// through run_status.h, after the last line is stored.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "db/writer.h"
#include "runs/process.h"
#include "runs/run_status.h"
#include "runs/watch.h"

namespace flotilla::runs {

// What watching a started (or re-attached) local run needs.
struct LocalWatch {
  int64_t run_id = 0;  // 0: not stored (records are delivered to the hooks, nothing is written)
  std::string name, run_dir;
  int64_t total_steps = 0;
  pid_t pid = 0;
  bool own_child = true;                // false: re-attached by pid; no exit code, its summary decides
  std::string start_time;               // the pid's /proc start time (re-attached: it must keep it)
  std::string origin = "flotilla run";  // prefixes the status reasons
  double poll_seconds = 0.2;
  uint64_t log_offset = 0;  // bytes of worker.log written before this worker started
};

struct LocalOutcome {
  int exit_code = -1;  // the worker's exit status (128 + signal when killed); kLeft when left running
  int signal = 0;
  RunEnd end;               // how the run ended (what was stored, or would have been)
  bool recorded = true;     // the end reached the store
  bool stored_all = true;   // every metrics line reached the store
  std::string store_error;  // why not ("" when all was stored)
  int64_t last_step = 0;    // the last step record seen
  std::string root_cause;   // launch's report of the failed rank ("" when none)
  // The run's row was deleted while its worker ran: the worker was stopped (checkpoint, exit 10),
  // nothing more was stored, store_error says so.
  bool vanished = false;
};

// Starts the worker for stored run `run_id` (`writer` null: no store) and records the run
// running with the command line as the reason. A worker that cannot start is recorded failed
// with why, and the error is rethrown (flotilla::Error).
LocalWatch start_local_run(db::Writer* writer, int64_t run_id, const std::string& name,
                           const SpawnOptions& spawn, const std::string& origin, int64_t total_steps);

// A LocalWatch for re-attaching to the live worker of `run_dir` (worker.pid); pid 0 when none.
LocalWatch attach_local_run(int64_t run_id, const std::string& name, const std::string& run_dir,
                            const std::string& origin, int64_t total_steps);

// Removes what a start wrote in `run_dir` (run.toml, worker.pid, worker.log, metrics.jsonl,
// config.toml, train.log, empty checkpoint folders) and the folder itself when that leaves it
// empty: for a new run that never trained, whose row is removed (docs/reliability.md L6).
void remove_start_files(const std::string& run_dir);

// Watches until the worker exits (or leave_requested), then records the end. Blocking; one
// thread per run. The worker's stop (SIGTERM: checkpoint, exit 10), checkpoint (SIGUSR1) and kill
// (SIGKILL of it and its ranks) come from the hooks and from the budget guard.
LocalOutcome watch_local_run(db::Writer* writer, const LocalWatch& w, const WatchHooks& hooks);

}  // namespace flotilla::runs
