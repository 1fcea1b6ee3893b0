// The queue's scheduler (issue 37): the one process per workspace that starts queued runs where
// placement says, watches them, and puts a preempted or place-failed run back at the head of the
// queue to resume elsewhere. `flotilla queue serve` and the app run it; tests drive tick().
//
// Decision: exactly once under crashes. Every step of an entry is a compare-and-set row change in
// the store (db/queue.h) taken in this order:
//   1. claim:      queued -> starting (starts + 1), with the place and the decision;
//   2. create:     the run's row is created under the name the entry reserved when it was added
//                  (explicit, never NAME-2), and its worker spawned (RunService::start), or a
//                  requeued entry's run resumed in its own row (RunService::resume);
//   3. record:     the run's id is written back to the entry, then starting -> running;
//   4. end:        running -> done | failed | cancelled, or back to queued (its run kept) when its
//                  place lost it.
// A scheduler SIGKILLed between any two steps leaves a row saying how far it got, and the next
// scheduler (the lease's holder_gone sees the dead pid at once) finishes the step instead of
// repeating the earlier ones: 'starting' with no run of the reserved name -> unclaim (start again,
// nothing was created); 'starting' with a run row that never got a worker (status created, no
// worker.pid in its folder) -> the row is removed and the entry unclaimed; 'starting' or 'running'
// with a run that is running -> attach and watch it; with a run that ended -> handle its end. So
// no run is started twice (its name is reserved and looked up before any new start) and none is
// lost (every 'starting'/'running' entry not watched by this scheduler is reconciled each tick).
// Local workers are started with stop_with_parent = false: a run outlives the scheduler's death.
//
// Decision: a run is watched on a thread of its own (ActiveRun::watch, its own store connection);
// the tick, on the caller's thread, is the only one that changes entries, so a watch thread only
// reports its WatchResult and the tick records the entry's end. The lease is renewed first in each
// tick; once it is lost (another scheduler took it over) nothing more is started and the watches
// are left to the new holder.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "db/database.h"
#include "db/queue.h"
#include "engine/config/run_config.h"
#include "runs/fault_point.h"
#include "runs/placement.h"
#include "runs/queue_place.h"
#include "runs/service.h"

namespace flotilla::runs {

class Scheduler;

// Where an entry goes now, as the scheduler needs it from placement (runs/queue_place.h).
struct PlaceChoice {
  bool start = false;  // start now on `key`
  std::string key;     // the place key ("" when refused or waiting for no particular place)
  Placement where;
  Layout layout;
  std::string words;                    // the decision, or why it waits / is refused
  std::string decision_json = "{}";     // queue_entries.decision (docs/scheduling.md)
  std::vector<std::string> wake_nodes;  // it waits for these powered-off nodes: wake them
  bool refused = false;  // no place can take it as it is (not a wait for busy or waking places)
};
// Placement as the scheduler asks it: the entry, its config (as stored), the steps it has left
// (-1: all), the time.
using ChoosePlace = std::function<PlaceChoice(db::Database& db, const db::QueueEntry& entry,
                                              const RunConfig& config, int64_t steps_to_go, double now)>;
// The default: list_places + choose_place (runs/queue_place.h), the Placement by placement_for.
// `local`: this machine's GPUs as probed (nullopt: the GPUs stored for node "local", else CPU ranks).
// `avoid`: places a start failed on lately (key -> why, in words): not weighed, named in the words.
PlaceChoice choose_by_cost(db::Database& db, const db::QueueEntry& entry, const RunConfig& config,
                           int64_t steps_to_go, double now,
                           const std::optional<LocalFacts>& local = std::nullopt,
                           const std::map<std::string, std::string>& avoid = {});

// How long a place a start failed on (a node that refused the connection, a cluster whose login
// failed) is left out of placement before it is tried again.
inline constexpr double kPlaceRetryS = 300;

struct SchedulerOptions {
  // ssh.database_path: the workspace store; writer: the one the runs store through (the app's),
  // nullptr: each run its own. stop_with_parent is always false (runs outlive the scheduler).
  ServiceOptions service;
  std::string origin;  // "flotilla queue serve", "flotilla app": the lease's and the events' words
  double tick_s = 2;
  double lease_stale_s = 30;
  // Run after each tick's own work (successive halving, idle autostop).
  std::vector<std::function<void(Scheduler&, db::Database&, double now)>> tick_hooks;
  // Wakes a node idle autostop powered off that an entry's best place waits for (true: it answers
  // now; else `why` says what it waits for). Called on the tick's thread: keep it short. Empty:
  // nodes are never stopped.
  std::function<bool(const std::string& node, std::string* why)> wake_node;
  std::function<void(const std::string& line)> note;  // each decision and end, as a line
  ChoosePlace choose;                                 // empty: choose_by_cost with `local`
  // This machine's GPUs, probed once by the front end (local_facts(probe_machine())); nullopt:
  // placement reads the GPUs stored for node "local", else offers CPU ranks here.
  std::optional<LocalFacts> local;
};

// What one tick did.
struct TickReport {
  bool lease_lost = false;
  int started = 0;   // runs started or resumed
  int adopted = 0;   // runs attached from an earlier scheduler
  int finished = 0;  // entries done, failed or cancelled
  int requeued = 0;  // entries put back at the head of the queue
  int waiting = 0;   // queued entries that did not start
  // Of those, the ones that cannot start by themselves (no place takes them; their --after run
  // ended otherwise).
  int blocked = 0;
  int active = 0;                  // entries starting or running after the tick
  std::vector<std::string> lines;  // what was decided, in words
};

class Scheduler {
 public:
  explicit Scheduler(SchedulerOptions options);
  ~Scheduler();  // releases the lease, leaves runs running
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Takes the lease or throws runs::Refusal naming the holder (pid, host, since when).
  void acquire();
  // One turn: renew the lease, collect ended watches, reconcile entries nobody here watches,
  // start what fits, run the hooks. Acquires the lease first when not held (throws as acquire).
  TickReport tick();
  // Loops tick() every tick_s until *stop_flag (or, with until_empty, until nothing is starting or
  // running and nothing queued can start by itself). Acquires the lease first. Returns 0, or 1
  // when the lease was lost.
  int serve(bool until_empty, const std::atomic<bool>* stop_flag);
  // Stops a run with a checkpoint, `why` recorded on its entry (successive halving).
  void stop_run(int64_t run_id, const std::string& why);
  std::vector<int64_t> watched_runs() const;
  const std::string& token() const { return token_; }
  const SchedulerOptions& options() const { return options_; }

 private:
  struct Watch;
  void say(TickReport& report, const std::string& line);
  void reconcile(db::Database& db, TickReport& report, double now);
  void collect(db::Database& db, TickReport& report, double now);
  void start_queued(db::Database& db, TickReport& report, double now);
  // Records the end of `entry`'s run as the store has it now.
  void handle_end(db::Database& db, const db::QueueEntry& entry, int64_t run_id, TickReport& report,
                  double now);
  void watch(const db::QueueEntry& entry, std::unique_ptr<ActiveRun> run);
  bool watching_entry(int64_t entry_id) const;
  void leave_all();

  SchedulerOptions options_;
  std::string token_;
  std::string host_, boot_id_;
  bool held_ = false, lost_ = false;
  std::unique_ptr<RunService> service_;
  mutable std::mutex mutex_;
  std::map<int64_t, std::unique_ptr<Watch>> watches_;  // by entry id
  std::map<int64_t, std::string> stop_whys_;           // run id -> why the scheduler stopped it
  // Places a start failed on: key -> (wall time until which they are left out, why). The tick's.
  std::map<std::string, std::pair<double, std::string>> unavailable_;
  std::map<std::string, std::string> avoided(double now);
};

}  // namespace flotilla::runs
