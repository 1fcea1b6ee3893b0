// The run queue in the store (issue 37): entries waiting to start, the ones the scheduler started
// and watches, the scheduler's lease, and sweeps (docs/scheduling.md, docs/store.md).
//
// Decision: the queue is rows, and every change of an entry's state is one transaction that checks
// the state it expects (compare-and-set), so two schedulers, a user's `queue cancel` and a
// scheduler's claim can never both win, and a scheduler killed at any point leaves a row that says
// exactly how far it got: 'starting' with no run (the run was never created: start it again),
// 'starting' or 'running' with a run (adopt the run: attach or settle it). The run's name is fixed
// when the entry is added, so a run created for an entry is found by name even when the scheduler
// died before it wrote the run's id back. Only one scheduler holds the lease (one row); a holder
// whose heartbeat stopped, or whose process the caller finds gone, is replaced.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "db/database.h"

namespace flotilla::db {

enum class EntryState { kQueued, kPaused, kStarting, kRunning, kDone, kFailed, kCancelled };
// "queued", "paused", ...
const char* entry_state_name(EntryState state);
std::optional<EntryState> parse_entry_state(const std::string& text);
// Whether an entry in this state is finished (done, failed, cancelled).
bool entry_finished(EntryState state);

struct QueueEntry {
  int64_t id = 0;
  std::string name;  // the run's name once started
  std::string config_toml;
  std::string config_path;          // where the config came from (shown only)
  std::vector<std::string> places;  // the place keys it may go to (empty: any)
  int64_t priority = 0;             // higher first
  double position = 0;              // order among equal priorities (lower first)
  std::string after_run;            // a run (name) that must complete first ("": none)
  std::optional<double> deadline;   // unix seconds by which it must finish
  std::optional<double> max_usd;    // the most it may cost
  EntryState state = EntryState::kQueued;
  std::optional<int64_t> run_id;  // the run started for it (kept across a requeue: resumed)
  std::string place;              // the place key it runs on or ran on last
  std::string why;                // why it waits, or the last decision, in words
  std::string decision_json = "{}";
  std::string group;  // a sweep's name ("": none)
  int64_t starts = 0;
  int64_t max_restarts = 3;
  std::string claimed_by;  // the scheduler lease token that started it
  double lost_usd = 0;     // what the work lost to preemptions cost
  int64_t lost_steps = 0;
  double created_at = 0, updated_at = 0;
};

struct NewQueueEntry {
  std::string name;            // "": refused
  bool explicit_name = false;  // refuse a taken name instead of picking NAME-2
  std::string config_toml;
  std::string config_path;
  std::vector<std::string> places;
  int64_t priority = 0;
  std::string after_run;
  std::optional<double> deadline;
  std::optional<double> max_usd;
  std::string group;
  int64_t max_restarts = 3;
};

// Adds an entry at the end of its priority; returns its id and the name it got (NAME-2, ... when
// NAME is a run's or an unfinished entry's; DbError kConstraint with explicit_name).
int64_t add_queue_entry(Database& db, const NewQueueEntry& entry, double now,
                        std::string* name_out = nullptr);
// Entries in the order the scheduler considers them (priority desc, position, id); finished ones
// only with `include_finished` (newest last).
std::vector<QueueEntry> list_queue(const Database& db, bool include_finished = false);
std::vector<QueueEntry> list_queue_group(const Database& db, const std::string& group);
std::optional<QueueEntry> find_queue_entry(const Database& db, int64_t id);
// By id ("12") or name; DbError kNotFound suggesting `flotilla queue`.
QueueEntry get_queue_entry(const Database& db, const std::string& id_or_name);
// The entry that started run `run_id` (nullopt: the run was not queued).
std::optional<QueueEntry> queue_entry_of_run(const Database& db, int64_t run_id);

// What a user asks. Each refuses (DbError kInvalid, a sentence naming the entry and what to do)
// when the entry's state forbids it: cancel a queued or paused entry (a started one is stopped as
// a run: `flotilla runs stop`); pause a queued one; resume a paused one.
void cancel_queue_entry(Database& db, int64_t id, double now);
void pause_queue_entry(Database& db, int64_t id, double now);
void resume_queue_entry(Database& db, int64_t id, double now);
// Moves an unstarted entry: to the top or bottom of its priority, or just before / after another
// entry (taking that entry's priority).
enum class MoveTo { kTop, kBottom, kBefore, kAfter };
void move_queue_entry(Database& db, int64_t id, MoveTo to, int64_t other_id, double now);
void set_queue_priority(Database& db, int64_t id, int64_t priority, double now);

// What the scheduler does. Each returns false (changing nothing) when the entry is not in the
// state the step expects, so a step that lost a race is seen, never repeated.
// queued -> starting (starts + 1), claimed by `token`, with the place and the decision.
bool claim_queue_entry(Database& db, int64_t id, const std::string& token, const std::string& place,
                       const std::string& why, const std::string& decision_json, double now);
// The run created for a starting entry (written as soon as the run exists).
bool set_queue_entry_run(Database& db, int64_t id, const std::string& token, int64_t run_id, double now);
// starting -> running.
bool mark_queue_entry_running(Database& db, int64_t id, const std::string& token, double now);
// starting|running -> done|failed|cancelled, with why.
bool finish_queue_entry(Database& db, int64_t id, EntryState state, const std::string& why, double now);
// starting|running -> queued at the head of the queue (its run kept, to be resumed), adding what
// the lost work cost.
bool requeue_queue_entry(Database& db, int64_t id, const std::string& why, double lost_usd,
                         int64_t lost_steps, double now);
// starting -> queued without counting a start (the run was never created).
bool unclaim_queue_entry(Database& db, int64_t id, const std::string& why, double now);
// A waiting entry's reason (and the decision that gave it); no state change.
void set_queue_entry_why(Database& db, int64_t id, const std::string& why, const std::string& decision_json,
                         double now);
// Another scheduler's token now holds these: take them over (claimed_by = token).
void adopt_queue_entry(Database& db, int64_t id, const std::string& token, double now);

// The scheduler's lease.
struct SchedulerLease {
  std::string token;
  int64_t pid = 0;
  std::string host;
  std::string boot_id;
  std::string origin;  // "flotilla queue serve", "flotilla app"
  double started_at = 0;
  double heartbeat = 0;
};
std::optional<SchedulerLease> scheduler_lease(const Database& db);
struct LeaseResult {
  bool acquired = false;
  std::optional<SchedulerLease> holder;  // who holds it when refused; the previous holder when taken over
  bool took_over = false;                // the lease was taken from a holder found gone or stale
};
// Takes the lease for `me` when nobody holds it, when the holder's heartbeat is older than
// `stale_after_s` at `me.heartbeat`, or when `holder_gone` says its process is gone (the caller
// checks: same host and boot, pid not alive). Holding it already (same token) renews it.
LeaseResult acquire_scheduler_lease(Database& db, const SchedulerLease& me, double stale_after_s,
                                    const std::function<bool(const SchedulerLease&)>& holder_gone);
// Renews the heartbeat; false when the lease is no longer ours (taken over: stop scheduling).
bool renew_scheduler_lease(Database& db, const std::string& token, double now);
void release_scheduler_lease(Database& db, const std::string& token);

// Sweeps: a group of queued runs from one config.
struct Sweep {
  std::string name;
  std::string config_path;
  std::string spec_json = "{}";     // the axes as given
  std::string halving_json = "{}";  // successive halving ("{}": off)
  double created_at = 0;
};
// DbError kConstraint when the name is taken.
void add_sweep(Database& db, const Sweep& sweep);
std::optional<Sweep> find_sweep(const Database& db, const std::string& name);
std::vector<Sweep> list_sweeps(const Database& db);

}  // namespace flotilla::db
