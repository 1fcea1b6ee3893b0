// Where a run executes, as the one watch loop (watch_place) sees it: how to read its metrics by
// byte offset, how to ask it to stop, checkpoint or die, how to tell it ended and how it ended, what
// it does on its own each turn (GPU samples, a queue's state), and whether it starts again by itself
// after a preemption. Three implementations: this machine (local_run.cpp), SSH nodes (node_run.cpp),
// a Slurm cluster (slurm_run.cpp). Internal to the runs layer: front ends use runs/service.h.
//
// Decision: everything the places share is the loop's, written once: committing the records with
// their byte offset (and carrying on while the store refuses them), the budget guard, the hooks'
// stop/checkpoint/kill/leave requests, the records' hooks, and recording the end through
// run_status.h after the last line is stored. A place only answers questions about itself, so a
// new place (a Kubernetes cluster, say) implements this interface and nothing else.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "db/writer.h"
#include "engine/train/metrics_reader.h"
#include "runs/run_status.h"
#include "runs/watch.h"

namespace flotilla::runs {

// Complete lines of a run's metrics read from byte `start` up to byte `end` (text "" when nothing new).
struct MetricsChunk {
  uint64_t start = 0;
  std::string text;
  uint64_t end = 0;
};

// What the loop knows when it asks a place for the run's end.
struct EndContext {
  StopCause cause = StopCause::kNone;
  std::string stop_note;     // the budget's or time limit's note
  int64_t last_step = 0;     // the last rank-0 step record this watch saw
  std::string summary_exit;  // the summary record's exit ("" when none seen)
  double summary_time = 0;
  int64_t summary_steps = 0;
  uint64_t offset = 0;         // the committed byte offset reached
  bool store_failing = false;  // the store refused the latest rows
};

// How the run ended, as the place saw it.
struct PlaceEnd {
  RunEnd end;
  int exit_code = 1;
  int signal = 0;
  std::string root_cause;
  // A record (this machine): check that it holds every step of a completed run (run_status.h).
  std::optional<RecordState> record;
  // Written in the transaction that records the end, before it (a Slurm job's last state).
  std::function<void(db::Database&, const RunEnd&)> before_end;
};

// One turn's facts for Place::turn.
struct Turn {
  bool got = false;  // metrics were stored this turn
  StopCause cause = StopCause::kNone;
  bool stopping = false;
  bool store_ok = true;  // the store takes this run's rows (false: failing, or the row is gone)
};

class Place {
 public:
  virtual ~Place() = default;

  // The committed offset's key in the store ("metrics.jsonl", "ssh:a:metrics.jsonl", ...).
  virtual std::string source() const = 0;
  // A short name for messages ("worker pid 12", "node a", "slurm job 7").
  virtual std::string label() const = 0;
  virtual double idle_seconds() const { return 0.25; }  // the sleep of a turn that stored nothing
  virtual double budget_period() const { return 1.0; }  // how often the budget is read
  virtual int drain_turns() const { return 1; }         // empty reads that end the final drain
  // Whether leaving stores what is there first (a local file is cheap to read; a remote place is
  // left at once, its next watcher reads on from the committed offset).
  virtual bool pull_on_leave() const { return false; }

  // Called once per watch before the first read (a re-attached node run is recorded running).
  virtual void begin(db::Writer* writer) {}
  // Complete lines after `offset`. Throws remote::ConnectionLost when the place is lost for good.
  virtual MetricsChunk read(uint64_t offset) = 0;
  // The records just stored (mirrors of checkpoints, the worker's clock).
  virtual void stored(const std::vector<MetricsRecord>& records) {}

  // Requests: stop with a checkpoint (`why` for the note), a checkpoint now, kill outright.
  virtual void stop(StopCause cause, const std::string& why, const Note& note) = 0;
  virtual void checkpoint(bool stopping, const Note& note) = 0;
  virtual void kill(const Note& note) = 0;

  // One turn after the read: liveness and the place's own work. True once the run has ended.
  virtual bool turn(const Turn& t, db::Writer* writer, const Note& note) = 0;
  // Whether the budget guard runs now (a queued job costs nothing yet).
  virtual bool budget_applies() const { return true; }

  // The end, once the last lines are stored.
  virtual PlaceEnd end(const EndContext& c, db::Writer* writer, const Note& note) = 0;
  // What happens when the run's row vanished while it ran ("stopping the worker (pid 12) ...").
  virtual std::string vanished_note() const = 0;
  // The note when the place is lost for good (the run stays as the store has it).
  virtual std::string lost_note(const std::string& what) const = 0;
  // After a watch ended with `exit_code`: start again by itself (a recovery after a preemption).
  // True: watch it again (begin() is called again); false: the watch returns.
  virtual bool recover(db::Writer& writer, int exit_code, const WatchHooks& hooks) { return false; }
};

// How the one loop's watch ended.
struct PlaceOutcome {
  int exit_code = -1;  // kLeft when left; ExitCode::kComm when the place was lost for good
  int signal = 0;
  RunEnd end;
  bool recorded = true;
  bool stored_all = true;
  std::string store_error;
  int64_t last_step = 0;
  std::string root_cause;
  bool vanished = false;
};

// The one watch loop (watch_loop.cpp): blocking, on the caller's thread. `writer` null: nothing is
// stored (a local run without a store); records still reach the hooks.
PlaceOutcome watch_place(Place& place, db::Writer* writer, int64_t run_id, const std::string& name,
                         const WatchHooks& hooks);

}  // namespace flotilla::runs
