// The queue's scheduler: the lease, the tick (reconcile, collect, start), the watch threads.
// The design (exactly once under crashes, one writer of entries) is in scheduler.h.
#include "runs/scheduler.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "db/costs.h"
#include "db/queries.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "engine/config/config_io.h"
#include "engine/core/error.h"
#include "runs/interruptions.h"
#include "runs/local_run.h"
#include "runs/process.h"
#include "runs/stale_runs.h"

namespace flotilla::runs {

namespace fs = std::filesystem;

void scheduler_fault_point(const char* point) {
  static std::mutex mutex;
  static std::map<std::string, int> hits;
  const char* env = std::getenv("FLOTILLA_SCHED_CRASH_AT");
  if (!env || !*env) return;
  std::string want = env;
  int nth = 1;
  if (const size_t colon = want.find(':'); colon != std::string::npos) {
    nth = std::atoi(want.c_str() + colon + 1);
    want.resize(colon);
  }
  if (want != point) return;
  std::lock_guard<std::mutex> lock(mutex);
  if (++hits[want] == nth) {
    std::fprintf(stderr, "flotilla: FLOTILLA_SCHED_CRASH_AT=%s: exiting 137 here\n", env);
    std::fflush(nullptr);
    ::_exit(137);
  }
}

namespace {

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "unknown host";
  return buf;
}

std::string new_token() {
  std::random_device rd;
  std::ostringstream s;
  s << std::hex << rd() << rd() << "-" << std::dec << ::getpid();
  return s.str();
}

std::string clock_text(double unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%H:%M", &tm);
  return buf;
}

// The lease's holder is a process on this host and boot that no longer exists.
bool holder_gone_here(const db::SchedulerLease& holder, const std::string& host, const std::string& boot) {
  if (holder.host != host || holder.boot_id != boot || boot.empty() || holder.pid <= 0) return false;
  return ::kill(static_cast<pid_t>(holder.pid), 0) != 0 && errno == ESRCH;
}

// The entry's config as stored, with the run's name set to the entry's reserved one.
RunConfig entry_config(const db::QueueEntry& e) {
  RunConfig c =
      parse_config_toml(e.config_toml, e.config_path.empty() ? "queue entry " + e.name : e.config_path);
  c.run.name = e.name;
  return c;
}

// checkpoint.every = "auto": the worker chooses Daly's interval from its measured save time and
// the place's mean time between interruptions (runs/interruptions.h), which the scheduler knows
// from the preemptions recorded there. A new run gets it in its config (checkpoint.mtbi_s); a
// resumed run on this machine gets <run dir>/checkpoint.mtbi (the worker's newest figure, read
// over its stored config's). A resume onto SSH nodes keeps the figure its config was started with.
std::optional<Mtbi> apply_place_interruptions(db::Database& db, RunConfig& config,
                                              const std::string& place_key, double now) {
  if (config.checkpoint.every != kCheckpointEveryAuto) return std::nullopt;
  const Mtbi m = place_mtbi(db, place_key, now);
  if (m.seconds <= 0) return std::nullopt;
  config.checkpoint.mtbi_s = std::round(m.seconds);
  return m;
}

// A run of a sweep carries the tag sweep:<group> (Compare opens the group by it).
void tag_sweep_run(db::Database& db, const db::QueueEntry& e, int64_t run_id) {
  if (e.group.empty()) return;
  db::Run row = db::get_run(db, run_id);
  const std::string tag = "sweep:" + e.group;
  if (std::find(row.tags.begin(), row.tags.end(), tag) != row.tags.end()) return;
  row.tags.push_back(tag);
  db::set_tags(db, run_id, row.tags);
}

int64_t last_loss_step(const db::Database& db, int64_t run_id) {
  const auto pts = db::metric_points(db, run_id, "loss");
  return pts.empty() ? 0 : static_cast<int64_t>(pts.back().step);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// A watched run

struct Scheduler::Watch {
  int64_t entry_id = 0;
  int64_t run_id = 0;
  std::string name;
  std::unique_ptr<ActiveRun> run;
  std::thread thread;
  std::atomic<bool> stop{false}, leave{false}, done{false};
  WatchResult result;
};

Scheduler::Scheduler(SchedulerOptions options) : options_(std::move(options)) {
  if (options_.origin.empty()) options_.origin = "flotilla queue serve";
  options_.service.origin = options_.origin;
  options_.service.stop_with_parent = false;  // a run outlives its scheduler
  // service.writer: kept as given (the app's Writer takes every run's rows, from any thread);
  // nullptr: each run writes through its own.
  if (!options_.choose)
    options_.choose = [this, local = options_.local](db::Database& db, const db::QueueEntry& e,
                                                     const RunConfig& c, int64_t steps, double now) {
      return choose_by_cost(db, e, c, steps, now, local, avoided(now));
    };
  token_ = new_token();
  host_ = host_name();
  boot_id_ = read_line("/proc/sys/kernel/random/boot_id");
  service_ = std::make_unique<RunService>(options_.service);
}

Scheduler::~Scheduler() {
  leave_all();
  if (held_ && !lost_) {
    try {
      db::Database db(options_.service.ssh.database_path);
      db::release_scheduler_lease(db, token_);
    } catch (const std::exception&) {
      // The store is gone or locked: the lease goes stale, or holder_gone sees this pid gone.
    }
  }
}

void Scheduler::leave_all() {
  std::map<int64_t, std::unique_ptr<Watch>> all;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    all.swap(watches_);
  }
  for (auto& [id, w] : all) w->leave = true;
  for (auto& [id, w] : all)
    if (w->thread.joinable()) w->thread.join();
}

std::map<std::string, std::string> Scheduler::avoided(double now) {
  std::map<std::string, std::string> out;
  for (auto it = unavailable_.begin(); it != unavailable_.end();) {
    if (it->second.first <= now) {
      it = unavailable_.erase(it);
      continue;
    }
    out[it->first] = it->second.second;
    ++it;
  }
  return out;
}

void Scheduler::acquire() {
  db::Database db(options_.service.ssh.database_path);
  db::SchedulerLease me;
  me.token = token_;
  me.pid = ::getpid();
  me.host = host_;
  me.boot_id = boot_id_;
  me.origin = options_.origin;
  me.started_at = me.heartbeat = db::now_seconds();
  const std::string host = host_, boot = boot_id_;
  const db::LeaseResult r = db::acquire_scheduler_lease(
      db, me, options_.lease_stale_s,
      [&](const db::SchedulerLease& holder) { return holder_gone_here(holder, host, boot); });
  if (!r.acquired) {
    const db::SchedulerLease& h = *r.holder;
    throw Refusal("the queue of this workspace is already served by " + h.origin + " (pid " +
                  std::to_string(h.pid) + " on " + h.host + ", since " + clock_text(h.started_at) +
                  "); stop it first, or let it serve this queue (a scheduler whose heartbeat stops is "
                  "replaced after " +
                  std::to_string(static_cast<int>(options_.lease_stale_s)) + " s)");
  }
  held_ = true;
  lost_ = false;
  if (r.took_over && r.holder && options_.note)
    options_.note("took the queue over from " + r.holder->origin + " (pid " + std::to_string(r.holder->pid) +
                  " on " + r.holder->host + "), which is gone");
  // Runs left running on this machine by whoever died are settled before anything is decided.
  service_->settle_stale();
}

void Scheduler::say(TickReport& report, const std::string& line) {
  report.lines.push_back(line);
  if (options_.note) options_.note(line);
}

bool Scheduler::watching_entry(int64_t entry_id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return watches_.count(entry_id) > 0;
}

std::vector<int64_t> Scheduler::watched_runs() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<int64_t> out;
  for (const auto& [id, w] : watches_) out.push_back(w->run_id);
  return out;
}

void Scheduler::stop_run(int64_t run_id, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_whys_[run_id] = why;
    for (auto& [id, w] : watches_)
      if (w->run_id == run_id) {
        w->stop = true;
        return;
      }
  }
  // Not watched here (another process watches it, or nobody): ask it through the store.
  service_->request_end(run_id, false, options_.origin + ": " + why);
}

void Scheduler::watch(const db::QueueEntry& entry, std::unique_ptr<ActiveRun> run) {
  auto w = std::make_unique<Watch>();
  w->entry_id = entry.id;
  w->run_id = run->id();
  w->name = run->name();
  w->run = std::move(run);
  Watch* raw = w.get();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    watches_[entry.id] = std::move(w);
  }
  raw->thread = std::thread([this, raw] {
    WatchHooks hooks;
    const std::string name = raw->name;
    hooks.note = [this, name](const std::string& line) {
      if (options_.note) options_.note("run " + name + ": " + line);
    };
    hooks.stop_requested = [raw] { return raw->stop.exchange(false); };
    hooks.leave_requested = [raw] { return raw->leave.load(); };
    try {
      raw->result = raw->run->watch(hooks);
    } catch (const std::exception& e) {
      raw->result.exit_code = -1;
      raw->result.root_cause = e.what();
      raw->result.recorded = false;
    }
    raw->done = true;
  });
}

TickReport Scheduler::tick() {
  TickReport report;
  if (!held_) acquire();
  if (lost_) {
    report.lease_lost = true;
    return report;
  }
  // The store was opened and checked by acquire(); a tick every 2 s must not read the whole file
  // again (PRAGMA quick_check of a store up to 64 MiB each time).
  db::OpenOptions tick_open;
  tick_open.create = false;
  tick_open.quick_check = false;
  db::Database db(options_.service.ssh.database_path, tick_open);
  double now = db::now_seconds();
  if (!db::renew_scheduler_lease(db, token_, now)) {
    lost_ = true;
    report.lease_lost = true;
    say(report, "the queue's lease was taken over by another scheduler: this one starts nothing more");
    // Its watches are left: the runs go on, and the new holder attaches them.
    leave_all();
    return report;
  }
  // A step that fails (a store busy past its timeout, a place's error nobody foresaw) is said and
  // tried again next tick: every step is a compare-and-set, so a half-done one is seen, not repeated.
  const auto step = [&](const char* what, void (Scheduler::*fn)(db::Database&, TickReport&, double)) {
    try {
      (this->*fn)(db, report, now);
    } catch (const std::exception& e) {
      say(report, std::string("the scheduler's ") + what + " failed (tried again next tick): " + e.what());
    }
  };
  step("collection of ended runs", &Scheduler::collect);
  step("reconciliation", &Scheduler::reconcile);
  if (!lost_) step("start of queued entries", &Scheduler::start_queued);
  now = db::now_seconds();
  for (const auto& hook : options_.tick_hooks) {
    try {
      hook(*this, db, now);
    } catch (const std::exception& e) {
      say(report, std::string("a scheduler hook failed: ") + e.what());
    }
  }
  for (const db::QueueEntry& e : db::list_queue(db))
    if (e.state == db::EntryState::kStarting || e.state == db::EntryState::kRunning) ++report.active;
  return report;
}

// Ended watches: their ends are recorded (by the watch) in the run's row; the entry follows.
void Scheduler::collect(db::Database& db, TickReport& report, double now) {
  std::vector<std::unique_ptr<Watch>> ended;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = watches_.begin(); it != watches_.end();) {
      if (it->second->done) {
        ended.push_back(std::move(it->second));
        it = watches_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& w : ended) {
    if (w->thread.joinable()) w->thread.join();
    if (w->result.exit_code == kLeft) continue;
    const auto entry = db::find_queue_entry(db, w->entry_id);
    if (!entry || db::entry_finished(entry->state)) continue;
    if (w->result.vanished) {
      db::finish_queue_entry(db, entry->id, db::EntryState::kCancelled, "its run was deleted while it ran",
                             now);
      ++report.finished;
      continue;
    }
    if (w->result.exit_code == static_cast<int>(ExitCode::kComm)) {
      // The watch lost its place for good and left the run 'running' (a node that stopped
      // answering): it is lost to this place; ended failed here, so it can resume elsewhere.
      try {
        const db::Run run = db::get_run(db, w->run_id);
        if (run.status == db::RunStatus::kRunning) {
          RunEnd end;
          end.status = db::RunStatus::kFailed;
          end.exit_code = static_cast<int>(ExitCode::kComm);
          end.note = "lost: " + (w->result.root_cause.empty() ? std::string("its place stopped answering")
                                                              : w->result.root_cause);
          end.reason = options_.origin + ": " + end.note;
          end.only_if_running = true;
          record_end(db, w->run_id, end);
        }
      } catch (const db::DbError&) {
      }
    }
    handle_end(db, *entry, w->run_id, report, now);
  }
}

void Scheduler::handle_end(db::Database& db, const db::QueueEntry& entry, int64_t run_id, TickReport& report,
                           double now) {
  const std::optional<db::Run> found = [&]() -> std::optional<db::Run> {
    try {
      return db::get_run(db, run_id);
    } catch (const db::DbError&) {
      return std::nullopt;
    }
  }();
  if (!found) {
    db::finish_queue_entry(db, entry.id, db::EntryState::kCancelled, "its run was deleted", now);
    ++report.finished;
    return;
  }
  const db::Run& run = *found;
  const std::string status = status_text(run);
  std::string stop_why;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = stop_whys_.find(run_id); it != stop_whys_.end()) stop_why = it->second;
  }
  using S = db::RunStatus;
  const bool place_failure = run.status == S::kPreempted ||
                             (run.status == S::kFailed &&
                              (run.exit_code.value_or(-1) == static_cast<int64_t>(ExitCode::kComm) ||
                               run.exit_code.value_or(-1) == static_cast<int64_t>(ExitCode::kPreempted) ||
                               run.status_note.find("lost") != std::string::npos ||
                               run.status_note.find("gone") != std::string::npos ||
                               run.status_note.find("signal 9") != std::string::npos));
  if (run.status == S::kCompleted) {
    if (db::finish_queue_entry(db, entry.id, db::EntryState::kDone, "completed", now)) {
      ++report.finished;
      say(report, "entry " + std::to_string(entry.id) + " (" + entry.name + "): completed");
    }
    return;
  }
  if (run.status == S::kStopped) {
    const bool asked_here = !stop_why.empty();
    const bool limit = run.status_note.find("budget") != std::string::npos ||
                       run.status_note.find("limit") != std::string::npos;
    const db::EntryState to = (asked_here || limit) ? db::EntryState::kDone : db::EntryState::kCancelled;
    // Successive halving words its own stop ("stopped by successive halving at ..."): kept as it is.
    const std::string asked_why =
        stop_why.rfind("stopped", 0) == 0 ? stop_why : "stopped by the scheduler: " + stop_why;
    const std::string why =
        asked_here ? asked_why : (limit ? status : "stopped by the user (" + status + ")");
    if (db::finish_queue_entry(db, entry.id, to, why, now)) {
      ++report.finished;
      say(report, "entry " + std::to_string(entry.id) + " (" + entry.name + "): " + why);
    }
    return;
  }
  if (place_failure) {
    // What the place lost: the steps after the newest checkpoint, at the run's measured cost per step.
    const auto cps = db::list_checkpoints(db, run_id);
    const int64_t last = last_loss_step(db, run_id);
    const int64_t saved = cps.empty() ? 0 : cps.back().step;
    const int64_t lost_steps = std::max<int64_t>(0, last - saved);
    const size_t points = db::metric_points(db, run_id, "loss").size();
    const double cost = db::run_cost_usd(db, run_id, now);
    const double lost_usd =
        points > 0 ? cost * static_cast<double>(lost_steps) / static_cast<double>(points) : 0;
    const int64_t restarts = entry.starts;  // each start after the first is a restart
    if (restarts > entry.max_restarts) {
      const std::string why = status + " after " + std::to_string(entry.starts) +
                              " start(s): its retry limit (" + std::to_string(entry.max_restarts) +
                              " restarts) is reached";
      if (db::finish_queue_entry(db, entry.id, db::EntryState::kFailed, why, now)) {
        ++report.finished;
        say(report, "entry " + std::to_string(entry.id) + " (" + entry.name + "): " + why);
      }
      return;
    }
    const std::string why = status + " on " + (entry.place.empty() ? "its place" : entry.place) +
                            ": back at the head of the queue to resume from step " + std::to_string(saved) +
                            " (" + std::to_string(lost_steps) + " step(s) lost)";
    if (db::requeue_queue_entry(db, entry.id, why, lost_usd, lost_steps, now)) {
      ++report.requeued;
      db::add_event(db, run_id, now, "scheduled", "warning", why);
      say(report, "entry " + std::to_string(entry.id) + " (" + entry.name + "): " + why);
    }
    scheduler_fault_point("after-end");
    return;
  }
  if (run.status == S::kFailed) {
    if (db::finish_queue_entry(db, entry.id, db::EntryState::kFailed, status, now)) {
      ++report.finished;
      say(report, "entry " + std::to_string(entry.id) + " (" + entry.name + "): " + status);
    }
  }
}

// Entries starting or running that no watch of this scheduler holds: a dead scheduler's, or this
// one's after a lost watch.
void Scheduler::reconcile(db::Database& db, TickReport& report, double now) {
  for (const db::QueueEntry& e : db::list_queue(db)) {
    if (e.state != db::EntryState::kStarting && e.state != db::EntryState::kRunning) continue;
    if (watching_entry(e.id)) continue;
    if (e.claimed_by != token_) db::adopt_queue_entry(db, e.id, token_, now);
    std::optional<db::Run> run;
    if (e.run_id) {
      try {
        run = db::get_run(db, *e.run_id);
      } catch (const db::DbError&) {
      }
    } else {
      run = db::find_run(db, e.name);
      if (run && run->name != e.name) run.reset();  // found by id, not by its reserved name
    }
    using S = db::RunStatus;
    if (!run) {
      if (e.state == db::EntryState::kStarting && !e.run_id) {
        db::unclaim_queue_entry(db, e.id, "its start was cut short before the run existed: starting it again",
                                now);
        say(report, "entry " + std::to_string(e.id) + " (" + e.name + "): start cut short, queued again");
      } else {
        db::finish_queue_entry(db, e.id, db::EntryState::kCancelled, "its run was deleted", now);
        ++report.finished;
      }
      continue;
    }
    if (e.state == db::EntryState::kStarting) {
      // A requeued entry whose resume never happened: its run is still halted.
      // (It ended before this claim: a resume that happened and ended again ends after it.)
      if (e.run_id && run->status != S::kRunning && run->status != S::kQueued && run->status != S::kCreated &&
          run->status != S::kCompleted && run->ended_at.value_or(0) < e.updated_at) {
        db::unclaim_queue_entry(db, e.id, "its resume was cut short: resuming it again", now);
        continue;
      }
      if (run->status == S::kCreated) {
        if (is_local_run(*run) && !fs::exists(fs::path(run->run_dir) / kWorkerPidFile)) {
          // Created, never started: remove the row so the reserved name starts afresh.
          db::delete_run(db, run->id);
          remove_start_files(run->run_dir);
          db::unclaim_queue_entry(
              db, e.id, "its start was cut short before its worker started: starting it again", now);
          say(report, "entry " + std::to_string(e.id) + " (" + e.name + "): start cut short, queued again");
        }
        continue;  // a worker did start: the settling of stale runs records it, next tick
      }
      db::set_queue_entry_run(db, e.id, token_, run->id, now);
      db::mark_queue_entry_running(db, e.id, token_, now);
      // What its dead starter did not get to record: the sweep's tag and the decision's event.
      tag_sweep_run(db, e, run->id);
      bool scheduled = false;
      for (const db::EventInfo& ev : db::list_events(db, run->id))
        if (ev.kind == "scheduled" && ev.time >= e.updated_at) scheduled = true;
      if (!scheduled)
        db::add_event(db, run->id, now, "scheduled", "info",
                      "started " + e.name + " on " + e.place + ": " + e.why + " (its start finished by " +
                          options_.origin + " after its starter died)",
                      e.decision_json);
    }
    if (run->status == S::kRunning || run->status == S::kQueued) {
      try {
        auto active = service_->attach(run->id);
        ++report.adopted;
        say(report, "entry " + std::to_string(e.id) + " (" + e.name + "): watching run " + run->name +
                        " again (" + active->where_text() + ")");
        const auto fresh = db::find_queue_entry(db, e.id);
        watch(fresh ? *fresh : e, std::move(active));
      } catch (const std::exception& ex) {
        // The worker is gone and the row not settled yet: settle, and handle its end next tick.
        service_->settle_stale();
      }
      continue;
    }
    const auto fresh = db::find_queue_entry(db, e.id);
    if (fresh) handle_end(db, *fresh, run->id, report, now);
  }
}

void Scheduler::start_queued(db::Database& db, TickReport& report, double now) {
  for (const db::QueueEntry& e : db::list_queue(db)) {
    if (lost_) return;
    if (e.state != db::EntryState::kQueued) continue;
    if (!e.after_run.empty()) {
      const auto before = db::find_run(db, e.after_run);
      if (!before || before->status != db::RunStatus::kCompleted) {
        const std::string why = "waits for run " + e.after_run + " to complete" +
                                (before ? " (it is " + status_text(*before) + ")" : " (no such run yet)");
        db::set_queue_entry_why(db, e.id, why, e.decision_json, now);
        ++report.waiting;
        // A run that ended otherwise never completes: the entry waits until the user acts.
        if (before && db::is_terminal(before->status) && before->status != db::RunStatus::kCompleted)
          ++report.blocked;
        continue;
      }
    }
    if (e.deadline && *e.deadline <= now) {
      db::cancel_queue_entry(db, e.id, now);
      db::set_queue_entry_why(db, e.id, "its deadline passed before it could start", e.decision_json, now);
      say(report,
          "entry " + std::to_string(e.id) + " (" + e.name + "): its deadline passed before it could start");
      ++report.finished;
      continue;
    }
    RunConfig config;
    try {
      config = entry_config(e);
    } catch (const std::exception& ex) {
      db::set_queue_entry_why(db, e.id, std::string("its config cannot be read: ") + ex.what(), "{}", now);
      ++report.waiting;
      continue;
    }
    int64_t steps_to_go = -1;
    if (e.run_id) {
      const auto cps = db::list_checkpoints(db, *e.run_id);
      const int64_t from = cps.empty() ? 0 : cps.back().step;
      steps_to_go = std::max<int64_t>(0, config.train.steps - from);
    }
    PlaceChoice choice;
    try {
      choice = options_.choose(db, e, config, steps_to_go, now);
    } catch (const std::exception& ex) {
      choice.start = false;
      choice.words = std::string("placement failed: ") + ex.what();
    }
    if (!choice.start) {
      // The best place is a node idle autostop powered off: wake it, and wait for it.
      if (options_.wake_node)
        for (const std::string& node : choice.wake_nodes) {
          std::string why;
          if (!options_.wake_node(node, &why) && !why.empty())
            choice.words += " (node " + node + ": " + why + ")";
        }
      db::set_queue_entry_why(db, e.id, choice.words, choice.decision_json, now);
      ++report.waiting;
      if (choice.refused) ++report.blocked;
      continue;
    }
    if (!db::claim_queue_entry(db, e.id, token_, choice.key, choice.words, choice.decision_json, now))
      continue;
    scheduler_fault_point("after-claim");
    const std::optional<Mtbi> mtbi = apply_place_interruptions(db, config, choice.key, now);
    // A start on nodes can take a while (deploying the worker): its progress keeps the lease fresh.
    auto last_renew = std::chrono::steady_clock::now();
    const Note progress = [&](const std::string& line) {
      if (options_.note) options_.note("entry " + std::to_string(e.id) + " (" + e.name + "): " + line);
      if (std::chrono::steady_clock::now() - last_renew > std::chrono::seconds(5)) {
        last_renew = std::chrono::steady_clock::now();
        try {
          if (!db::renew_scheduler_lease(db, token_, db::now_seconds())) lost_ = true;
        } catch (const db::DbError&) {
        }
      }
    };
    std::unique_ptr<ActiveRun> active;
    try {
      if (e.run_id) {
        ResumeRequest r;
        r.where = choice.where;
        r.layout = choice.layout;
        active = service_->resume(*e.run_id, r, progress);
      } else {
        RunRequest r;
        r.config = config;
        r.name = e.name;
        r.explicit_name = true;
        r.where = choice.where;
        r.layout = choice.layout;
        r.budget_usd = e.max_usd;
        active = service_->start(r, progress);
      }
    } catch (const std::exception& ex) {
      const std::string what = ex.what();
      // A run of the reserved name exists now (created before the failure): reconcile it next tick.
      if (!e.run_id && db::find_run(db, e.name)) continue;
      const auto* err = dynamic_cast<const Error*>(&ex);
      const bool bad_input = err && (err->code() == ExitCode::kConfig || err->code() == ExitCode::kUsage);
      if (bad_input) {
        db::finish_queue_entry(db, e.id, db::EntryState::kFailed, "could not start: " + what, now);
        ++report.finished;
      } else {
        db::unclaim_queue_entry(db, e.id, "could not start on " + choice.key + ": " + what, now);
        // Left out of placement for a while, so the entry goes elsewhere instead of trying the
        // same unreachable place every tick.
        if (!choice.key.empty())
          unavailable_[choice.key] = {now + kPlaceRetryS,
                                      "could not start there at " + clock_text(now) + ": " + what};
        ++report.waiting;
      }
      say(report, "entry " + std::to_string(e.id) + " (" + e.name + "): could not start: " + what);
      continue;
    }
    scheduler_fault_point("after-start");
    const int64_t run_id = active->id();
    // A run resumed here keeps the config it was started with elsewhere: the file in its (new)
    // folder gives its worker this machine's figure within seconds.
    if (mtbi && e.run_id && choice.key == "local") {
      const std::string dir = db::get_run(db, run_id).run_dir;
      if (!dir.empty()) write_mtbi_file(dir, *mtbi);
    }
    if (lost_) {
      // Another scheduler took the queue over meanwhile: it finds this run by its reserved name.
      db::set_queue_entry_run(db, e.id, token_, run_id, now);
      return;
    }
    db::set_queue_entry_run(db, e.id, token_, run_id, now);
    scheduler_fault_point("after-record");
    db::mark_queue_entry_running(db, e.id, token_, now);
    tag_sweep_run(db, e, run_id);
    const std::string line = std::string(e.run_id ? "resumed" : "started") + " " + e.name + " on " +
                             choice.key + (choice.layout.empty() ? "" : " (" + choice.layout.text() + ")") +
                             ": " + choice.words;
    db::add_event(db, run_id, now, "scheduled", "info", line, choice.decision_json);
    ++report.started;
    say(report, "entry " + std::to_string(e.id) + ": " + line);
    const auto fresh = db::find_queue_entry(db, e.id);
    watch(fresh ? *fresh : e, std::move(active));
    scheduler_fault_point("after-running");
  }
}

int Scheduler::serve(bool until_empty, const std::atomic<bool>* stop_flag) {
  if (!held_) acquire();
  while (!(stop_flag && stop_flag->load())) {
    const TickReport r = tick();
    if (r.lease_lost) return 1;
    if (until_empty && r.active == 0 && r.started == 0 && watched_runs().empty()) {
      // Nothing runs; what is still queued can never start by itself (its --after run ended
      // otherwise, or no place can take it): a script waits no longer. Their why says so.
      if (r.waiting == r.blocked) {
        if (r.blocked > 0 && options_.note)
          options_.note(std::to_string(r.blocked) + " queued entr" + (r.blocked == 1 ? "y" : "ies") +
                        " cannot start (flotilla queue shows why); nothing else is queued or running");
        return 0;
      }
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(options_.tick_s);
    while (std::chrono::steady_clock::now() < until && !(stop_flag && stop_flag->load()))
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  leave_all();
  return 0;
}

}  // namespace flotilla::runs
