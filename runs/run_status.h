// How a run's status changes, decided and written in one place for every kind of run (local
// runs of the CLI and the app, runs on SSH nodes, later Slurm): the runs layer is the only caller
// of db::set_status() outside db/ (the layer guard keeps it so).
//
// Decision: the status follows the worker's exit, read together with who asked it to stop. Exit 0
// is completed; exit 10 (the worker checkpointed and stopped) is `stopped` when we asked (a user's
// stop, a reached budget or time limit, a kill) and `preempted` when someone else did (a spot
// notice); any other exit, or a signal nobody here sent, is `failed` with the exit code's name or
// the launcher's root cause. A worker nobody can wait for (re-attached by pid, or found gone) ends
// as its summary record says, at the time it ended, not when we noticed. Each end carries a short
// note shown next to the status ("stopped (budget reached: $0.0201 of $0.02)").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "db/database.h"
#include "db/run_store.h"

namespace flotilla::runs {

// Who asked the worker to stop (kNone: nobody here; an exit 10 then means a preemption).
enum class StopCause { kNone, kUser, kBudget, kKill, kParentGone };

struct RunEnd {
  db::RunStatus status = db::RunStatus::kFailed;
  std::string reason;  // the status event's text: who saw what ("flotilla run: worker exit 10 ...")
  std::string note;    // the short why shown with the status ("budget reached: $0.0201 of $0.02")
  std::optional<int64_t> exit_code;
  double at = 0;                 // when it ended (0: now), a wall time
  double at_boot = 0;            // the monotonic reading at `at` (engine/core/clock.h; 0: unknown)
  bool only_if_running = false;  // settling a lost run: leave it as it is if it is no longer running
};

// The end of a worker we waited for: `exit_code`, or `signal` > 0 when a signal killed it.
// `origin` prefixes the reason ("flotilla run", "flotilla app", "node a"); `stop_note` is the
// budget's or time limit's note when cause is kBudget; `root_cause` the launcher's report of a
// failed rank ("" when none).
RunEnd end_for_exit(int exit_code, int signal, StopCause cause, const std::string& origin,
                    const std::string& stop_note = "", const std::string& root_cause = "");

// The end of a worker we could not wait for, from its summary record's `exit` ("" when it left
// none) and who asked it to stop (a request this process made or one stored by another:
// db::end_request): completed, stopped (on request, `stop_note` for a budget, killed on request) or
// preempted as it says; killed on request when a kill was asked and it left none; else failed as
// lost, with `why`.
RunEnd end_for_summary(const std::string& summary_exit, const std::string& origin, const std::string& why,
                       StopCause cause = StopCause::kNone, const std::string& stop_note = "");

// What a run's record (metrics.jsonl) shows once its worker has ended.
struct RecordState {
  bool torn = false;          // it ends with an incomplete line (a write the disk did not take)
  uint64_t whole_bytes = 0;   // where its last whole line ends
  bool has_summary = false;   // it holds the worker's summary record
  int64_t summary_steps = 0;  // the steps that summary counts
  int64_t last_step = 0;      // the last step record read by this watch (0: none)
};

// A run is "completed" only on a whole record: a torn record, one without a summary, or one whose
// step records stop short of the steps its summary counts turns a completed `end` into failed,
// naming the step its record reaches and why (the worker's own writes failed: docs/reliability.md
// A2). Any other end is left as it is.
void check_completed_record(RunEnd& end, const RecordState& record);

// The run is running from `at` (0: now). A no-op when it is already running; throws DbError when
// the state machine refuses (a completed run).
void record_running(db::Database& db, int64_t run_id, double at, const std::string& reason);
// The run waits in a queue from `at` (0: now): a Slurm job submitted or resubmitted, or pending again
// after a requeue. Throws DbError when the state machine refuses.
void record_queued(db::Database& db, int64_t run_id, double at, const std::string& reason);
// Someone else halted the run and it starts again by itself (a Slurm requeue): preempted, with
// `note` shown beside the status. Throws DbError when the state machine refuses.
void record_requeued(db::Database& db, int64_t run_id, const std::string& reason, const std::string& note);
// Applies `end` when the state machine allows it (a refused change leaves the run as it is, with
// the reason recorded as a warning event). Returns the status the run has afterwards.
db::RunStatus record_end(db::Database& db, int64_t run_id, const RunEnd& end);

// "stopped (budget reached: $0.0201 of $0.02)", "completed", "failed (exit 4: data error)": a
// stored run's status as pages and commands show it.
std::string status_text(db::RunStatus status, const std::string& note);
std::string status_text(const db::Run& run);

// The exit code's name as docs/worker.md lists it ("data error", "preempted", ...); 129-192, a shell's
// status of a child ended by a signal, as "killed by signal 15 (Terminated)".
std::string exit_name(int exit_code);

}  // namespace flotilla::runs
