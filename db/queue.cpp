// The run queue in the store (see queue.h).
#include "db/queue.h"

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "db/errors.h"
#include "db/sql.h"

namespace flotilla::db {
namespace {

constexpr const char* kStateNames[] = {"queued", "paused", "starting", "running",
                                       "done",   "failed", "cancelled"};

constexpr const char* kSelect =
    "SELECT id, name, config_toml, config_path, places, priority, position, after_run, deadline, max_usd, "
    "state, run_id, place, why, decision, group_name, starts, max_restarts, claimed_by, lost_usd, "
    "lost_steps, "
    "created_at, updated_at FROM queue_entries";
constexpr const char* kOrder = " ORDER BY priority DESC, position, id";

std::vector<std::string> parse_places(const std::string& text) {
  std::vector<std::string> out;
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_array()) return out;
  for (const auto& v : j)
    if (v.is_string()) out.push_back(v.get<std::string>());
  return out;
}

std::string places_json(const std::vector<std::string>& places) { return nlohmann::json(places).dump(); }

QueueEntry read_entry(const Stmt& st) {
  QueueEntry e;
  e.id = st.i64(0);
  e.name = st.text(1);
  e.config_toml = st.text(2);
  e.config_path = st.text(3);
  e.places = parse_places(st.text(4));
  e.priority = st.i64(5);
  e.position = st.f64(6);
  e.after_run = st.text(7);
  e.deadline = st.opt_f64(8);
  e.max_usd = st.opt_f64(9);
  e.state = parse_entry_state(st.text(10)).value_or(EntryState::kFailed);
  e.run_id = st.opt_i64(11);
  e.place = st.text(12);
  e.why = st.text(13);
  e.decision_json = st.text(14);
  e.group = st.text(15);
  e.starts = st.i64(16);
  e.max_restarts = st.i64(17);
  e.claimed_by = st.text(18);
  e.lost_usd = st.f64(19);
  e.lost_steps = st.i64(20);
  e.created_at = st.f64(21);
  e.updated_at = st.f64(22);
  return e;
}

std::vector<QueueEntry> read_all(Stmt& st) {
  std::vector<QueueEntry> out;
  while (st.step()) out.push_back(read_entry(st));
  return out;
}

bool name_taken(const Database& db, const std::string& name) {
  Stmt st(db,
          "SELECT (SELECT COUNT(*) FROM runs WHERE name = ?1) + (SELECT COUNT(*) FROM queue_entries "
          "WHERE name = ?1 AND state IN ('queued','paused','starting','running','done'))");
  st.bind(1, name);
  return st.step() && st.i64(0) > 0;
}

QueueEntry must_find(const Database& db, int64_t id) {
  auto e = find_queue_entry(db, id);
  if (!e)
    throw DbError(DbErrorKind::kNotFound, "no queue entry " + std::to_string(id) +
                                              " (see `flotilla queue` for the entries there are)");
  return *e;
}

std::string entry_words(const QueueEntry& e) {
  return "queue entry " + std::to_string(e.id) + " (" + e.name + ")";
}

// Sets state `to` where the entry is in one of `from`; the row count says whether it was.
bool cas_state(Database& db, int64_t id, const std::vector<EntryState>& from, EntryState to, double now,
               const std::string& extra_set = "", const std::function<void(Stmt&)>& bind_extra = {}) {
  std::string in;
  for (EntryState s : from) in += std::string(in.empty() ? "'" : ",'") + entry_state_name(s) + "'";
  Stmt st(db, "UPDATE queue_entries SET state = ?1, updated_at = ?2" + extra_set +
                  " WHERE id = ?3 AND state IN (" + in + ")");
  st.bind(1, entry_state_name(to)).bind(2, now).bind(3, id);
  if (bind_extra) bind_extra(st);
  st.run();
  return changes_count(db) > 0;
}

[[noreturn]] void refuse(const QueueEntry& e, const std::string& what) {
  throw DbError(DbErrorKind::kInvalid, entry_words(e) + " is " + entry_state_name(e.state) + ": " + what);
}

}  // namespace

const char* entry_state_name(EntryState state) { return kStateNames[static_cast<int>(state)]; }

std::optional<EntryState> parse_entry_state(const std::string& text) {
  for (int i = 0; i < 7; ++i)
    if (text == kStateNames[i]) return static_cast<EntryState>(i);
  return std::nullopt;
}

bool entry_finished(EntryState s) {
  return s == EntryState::kDone || s == EntryState::kFailed || s == EntryState::kCancelled;
}

int64_t add_queue_entry(Database& db, const NewQueueEntry& entry, double now, std::string* name_out) {
  if (entry.name.empty()) throw DbError(DbErrorKind::kInvalid, "a queue entry needs a run name");
  int64_t id = 0;
  write_tx(db, [&] {
    std::string name = entry.name;
    if (name_taken(db, name)) {
      if (entry.explicit_name)
        throw DbError(DbErrorKind::kConstraint,
                      "the run name '" + name + "' is taken by a run or a queue entry; pick another name");
      for (int k = 2;; ++k) {
        name = entry.name + "-" + std::to_string(k);
        if (!name_taken(db, name)) break;
      }
    }
    Stmt pos(db, "SELECT COALESCE(MAX(position), 0) + 1 FROM queue_entries WHERE priority = ?1");
    pos.bind(1, entry.priority);
    const double position = pos.step() ? pos.f64(0) : 1;
    Stmt st(
        db,
        "INSERT INTO queue_entries(name, config_toml, config_path, places, priority, position, after_run, "
        "deadline, max_usd, group_name, max_restarts, created_at, updated_at) "
        "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?12)");
    st.bind(1, name).bind(2, entry.config_toml).bind(3, entry.config_path).bind(4, places_json(entry.places));
    st.bind(5, entry.priority).bind(6, position).bind(7, entry.after_run).bind(8, entry.deadline);
    st.bind(9, entry.max_usd).bind(10, entry.group).bind(11, entry.max_restarts).bind(12, now);
    st.run();
    id = last_insert_id(db);
    if (name_out) *name_out = name;
  });
  return id;
}

std::vector<QueueEntry> list_queue(const Database& db, bool include_finished) {
  if (include_finished) {
    Stmt st(db, std::string(kSelect) +
                    " ORDER BY state IN ('done','failed','cancelled'), "
                    "CASE WHEN state IN ('done','failed','cancelled') THEN updated_at END, priority DESC, "
                    "position, id");
    return read_all(st);
  }
  Stmt st(db, std::string(kSelect) + " WHERE state NOT IN ('done','failed','cancelled')" + kOrder);
  return read_all(st);
}

std::vector<QueueEntry> list_queue_group(const Database& db, const std::string& group) {
  Stmt st(db, std::string(kSelect) + " WHERE group_name = ?1 ORDER BY id");
  st.bind(1, group);
  return read_all(st);
}

std::optional<QueueEntry> find_queue_entry(const Database& db, int64_t id) {
  Stmt st(db, std::string(kSelect) + " WHERE id = ?1");
  st.bind(1, id);
  if (!st.step()) return std::nullopt;
  return read_entry(st);
}

QueueEntry get_queue_entry(const Database& db, const std::string& id_or_name) {
  const bool numeric = !id_or_name.empty() && std::all_of(id_or_name.begin(), id_or_name.end(), ::isdigit);
  if (numeric && id_or_name.size() < 18) {
    if (auto e = find_queue_entry(db, std::strtoll(id_or_name.c_str(), nullptr, 10))) return *e;
  }
  // By name: the newest entry of that name (an earlier cancelled one may share it).
  Stmt st(db, std::string(kSelect) + " WHERE name = ?1 ORDER BY id DESC LIMIT 1");
  st.bind(1, id_or_name);
  if (st.step()) return read_entry(st);
  throw DbError(DbErrorKind::kNotFound,
                "no queue entry '" + id_or_name + "' (see `flotilla queue` for the entries there are)");
}

std::optional<QueueEntry> queue_entry_of_run(const Database& db, int64_t run_id) {
  Stmt st(db, std::string(kSelect) + " WHERE run_id = ?1 ORDER BY id DESC LIMIT 1");
  st.bind(1, run_id);
  if (!st.step()) return std::nullopt;
  return read_entry(st);
}

void cancel_queue_entry(Database& db, int64_t id, double now) {
  write_tx(db, [&] {
    const QueueEntry e = must_find(db, id);
    if (e.state == EntryState::kCancelled) return;
    if (e.state == EntryState::kStarting || e.state == EntryState::kRunning) {
      const std::string run = e.run_id ? "run " + e.name : "its run";
      refuse(e, "stop " + run + " instead (`flotilla runs stop " + e.name + "`, or Stop on the Live page)");
    }
    if (entry_finished(e.state)) refuse(e, "there is nothing left to cancel");
    cas_state(db, id, {EntryState::kQueued, EntryState::kPaused}, EntryState::kCancelled, now, ", why = ?4",
              [](Stmt& st) { st.bind(4, "cancelled by the user"); });
  });
}

void pause_queue_entry(Database& db, int64_t id, double now) {
  write_tx(db, [&] {
    const QueueEntry e = must_find(db, id);
    if (e.state == EntryState::kPaused) return;
    if (e.state != EntryState::kQueued) refuse(e, "only a queued entry can be paused");
    cas_state(db, id, {EntryState::kQueued}, EntryState::kPaused, now, ", why = ?4",
              [](Stmt& st) { st.bind(4, "paused by the user: `flotilla queue resume` lets it start"); });
  });
}

void resume_queue_entry(Database& db, int64_t id, double now) {
  write_tx(db, [&] {
    const QueueEntry e = must_find(db, id);
    if (e.state == EntryState::kQueued) return;
    if (e.state != EntryState::kPaused) refuse(e, "only a paused entry can be resumed in the queue");
    cas_state(db, id, {EntryState::kPaused}, EntryState::kQueued, now, ", why = ?4",
              [](Stmt& st) { st.bind(4, "waiting for the scheduler"); });
  });
}

void move_queue_entry(Database& db, int64_t id, MoveTo to, int64_t other_id, double now) {
  write_tx(db, [&] {
    const QueueEntry e = must_find(db, id);
    if (e.state != EntryState::kQueued && e.state != EntryState::kPaused)
      refuse(e, "only an entry that has not started can be moved");
    int64_t priority = e.priority;
    double position = e.position;
    if (to == MoveTo::kTop || to == MoveTo::kBottom) {
      Stmt st(db, to == MoveTo::kTop ? "SELECT MIN(position) - 1 FROM queue_entries WHERE priority = ?1"
                                     : "SELECT MAX(position) + 1 FROM queue_entries WHERE priority = ?1");
      st.bind(1, priority);
      if (st.step() && !st.is_null(0)) position = st.f64(0);
    } else {
      if (other_id == id) return;
      const QueueEntry other = must_find(db, other_id);
      priority = other.priority;
      // The neighbour on the other side of `other` in the queue's order, to land between the two.
      Stmt st(
          db,
          to == MoveTo::kBefore
              ? "SELECT MAX(position) FROM queue_entries WHERE priority = ?1 AND position < ?2 AND id != ?3"
              : "SELECT MIN(position) FROM queue_entries WHERE priority = ?1 AND position > ?2 AND id != ?3");
      st.bind(1, priority).bind(2, other.position).bind(3, id);
      const bool have = st.step() && !st.is_null(0);
      const double step = to == MoveTo::kBefore ? -1.0 : 1.0;
      position = have ? (st.f64(0) + other.position) / 2 : other.position + step;
    }
    Stmt up(db, "UPDATE queue_entries SET priority = ?1, position = ?2, updated_at = ?3 WHERE id = ?4");
    up.bind(1, priority).bind(2, position).bind(3, now).bind(4, id);
    up.run();
  });
}

void set_queue_priority(Database& db, int64_t id, int64_t priority, double now) {
  write_tx(db, [&] {
    const QueueEntry e = must_find(db, id);
    if (entry_finished(e.state)) refuse(e, "a finished entry keeps its priority");
    Stmt pos(db, "SELECT COALESCE(MAX(position), 0) + 1 FROM queue_entries WHERE priority = ?1");
    pos.bind(1, priority);
    const double position = pos.step() ? pos.f64(0) : 1;
    Stmt up(db, "UPDATE queue_entries SET priority = ?1, position = ?2, updated_at = ?3 WHERE id = ?4");
    up.bind(1, priority).bind(2, position).bind(3, now).bind(4, id);
    up.run();
  });
}

bool claim_queue_entry(Database& db, int64_t id, const std::string& token, const std::string& place,
                       const std::string& why, const std::string& decision_json, double now) {
  bool ok = false;
  write_tx(db, [&] {
    ok = cas_state(db, id, {EntryState::kQueued}, EntryState::kStarting, now,
                   ", claimed_by = ?4, place = ?5, why = ?6, decision = ?7, starts = starts + 1",
                   [&](Stmt& st) { st.bind(4, token).bind(5, place).bind(6, why).bind(7, decision_json); });
  });
  return ok;
}

bool set_queue_entry_run(Database& db, int64_t id, const std::string& token, int64_t run_id, double now) {
  Stmt st(db,
          "UPDATE queue_entries SET run_id = ?1, updated_at = ?2 WHERE id = ?3 AND claimed_by = ?4 "
          "AND state IN ('starting','running')");
  bool ok = false;
  write_tx(db, [&] {
    st.bind(1, run_id).bind(2, now).bind(3, id).bind(4, token);
    st.run();
    ok = changes_count(db) > 0;
  });
  return ok;
}

bool mark_queue_entry_running(Database& db, int64_t id, const std::string& token, double now) {
  bool ok = false;
  write_tx(db, [&] {
    Stmt st(db,
            "UPDATE queue_entries SET state = 'running', updated_at = ?1 WHERE id = ?2 AND claimed_by = ?3 "
            "AND state = 'starting'");
    st.bind(1, now).bind(2, id).bind(3, token);
    st.run();
    ok = changes_count(db) > 0;
  });
  return ok;
}

bool finish_queue_entry(Database& db, int64_t id, EntryState state, const std::string& why, double now) {
  if (!entry_finished(state))
    throw DbError(DbErrorKind::kInvalid, "finish_queue_entry: not a finished state");
  bool ok = false;
  write_tx(db, [&] {
    ok = cas_state(db, id, {EntryState::kStarting, EntryState::kRunning}, state, now, ", why = ?4",
                   [&](Stmt& st) { st.bind(4, why); });
  });
  return ok;
}

bool requeue_queue_entry(Database& db, int64_t id, const std::string& why, double lost_usd,
                         int64_t lost_steps, double now) {
  bool ok = false;
  write_tx(db, [&] {
    const auto e = find_queue_entry(db, id);
    if (!e) return;
    Stmt head(db, "SELECT COALESCE(MIN(position), 1) - 1 FROM queue_entries WHERE priority = ?1");
    head.bind(1, e->priority);
    const double position = head.step() ? head.f64(0) : 0;
    ok = cas_state(
        db, id, {EntryState::kStarting, EntryState::kRunning}, EntryState::kQueued, now,
        ", why = ?4, position = ?5, lost_usd = lost_usd + ?6, lost_steps = lost_steps + ?7, claimed_by = ''",
        [&](Stmt& st) { st.bind(4, why).bind(5, position).bind(6, lost_usd).bind(7, lost_steps); });
  });
  return ok;
}

bool unclaim_queue_entry(Database& db, int64_t id, const std::string& why, double now) {
  bool ok = false;
  write_tx(db, [&] {
    ok = cas_state(db, id, {EntryState::kStarting}, EntryState::kQueued, now,
                   ", why = ?4, starts = MAX(starts - 1, 0), claimed_by = ''",
                   [&](Stmt& st) { st.bind(4, why); });
  });
  return ok;
}

void set_queue_entry_why(Database& db, int64_t id, const std::string& why, const std::string& decision_json,
                         double now) {
  write_tx(db, [&] {
    Stmt st(db,
            "UPDATE queue_entries SET why = ?1, decision = ?2, updated_at = ?3 WHERE id = ?4 "
            "AND (why != ?1 OR decision != ?2)");
    st.bind(1, why).bind(2, decision_json.empty() ? "{}" : decision_json).bind(3, now).bind(4, id);
    st.run();
  });
}

void adopt_queue_entry(Database& db, int64_t id, const std::string& token, double now) {
  write_tx(db, [&] {
    Stmt st(db, "UPDATE queue_entries SET claimed_by = ?1, updated_at = ?2 WHERE id = ?3");
    st.bind(1, token).bind(2, now).bind(3, id);
    st.run();
  });
}

namespace {
std::optional<SchedulerLease> read_lease(const Database& db) {
  Stmt st(
      db,
      "SELECT token, pid, host, boot_id, origin, started_at, heartbeat FROM scheduler_lease WHERE id = 1");
  if (!st.step()) return std::nullopt;
  SchedulerLease l;
  l.token = st.text(0);
  l.pid = st.i64(1);
  l.host = st.text(2);
  l.boot_id = st.text(3);
  l.origin = st.text(4);
  l.started_at = st.f64(5);
  l.heartbeat = st.f64(6);
  return l;
}
}  // namespace

std::optional<SchedulerLease> scheduler_lease(const Database& db) { return read_lease(db); }

LeaseResult acquire_scheduler_lease(Database& db, const SchedulerLease& me, double stale_after_s,
                                    const std::function<bool(const SchedulerLease&)>& holder_gone) {
  LeaseResult r;
  write_tx(db, [&] {
    const auto holder = read_lease(db);
    if (holder && holder->token != me.token) {
      const bool stale = me.heartbeat - holder->heartbeat > stale_after_s;
      const bool gone = holder_gone && holder_gone(*holder);
      if (!stale && !gone) {
        r.holder = holder;
        return;
      }
      r.took_over = true;
      r.holder = holder;
    }
    Stmt st(db,
            "INSERT INTO scheduler_lease(id, token, pid, host, boot_id, origin, started_at, heartbeat) "
            "VALUES (1, ?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT(id) DO UPDATE SET token = excluded.token, "
            "pid = excluded.pid, host = excluded.host, boot_id = excluded.boot_id, origin = excluded.origin, "
            "started_at = CASE WHEN scheduler_lease.token = excluded.token THEN scheduler_lease.started_at "
            "ELSE excluded.started_at END, heartbeat = excluded.heartbeat");
    st.bind(1, me.token).bind(2, me.pid).bind(3, me.host).bind(4, me.boot_id).bind(5, me.origin);
    st.bind(6, me.started_at).bind(7, me.heartbeat);
    st.run();
    r.acquired = true;
  });
  return r;
}

bool renew_scheduler_lease(Database& db, const std::string& token, double now) {
  bool ok = false;
  write_tx(db, [&] {
    Stmt st(db, "UPDATE scheduler_lease SET heartbeat = ?1 WHERE id = 1 AND token = ?2");
    st.bind(1, now).bind(2, token);
    st.run();
    ok = changes_count(db) > 0;
  });
  return ok;
}

void release_scheduler_lease(Database& db, const std::string& token) {
  write_tx(db, [&] {
    Stmt st(db, "DELETE FROM scheduler_lease WHERE id = 1 AND token = ?1");
    st.bind(1, token);
    st.run();
  });
}

void add_sweep(Database& db, const Sweep& sweep) {
  write_tx(db, [&] {
    Stmt taken(db, "SELECT 1 FROM sweeps WHERE name = ?1");
    taken.bind(1, sweep.name);
    if (taken.step())
      throw DbError(DbErrorKind::kConstraint,
                    "a sweep named '" + sweep.name + "' exists; pick another --name");
    Stmt st(db,
            "INSERT INTO sweeps(name, config_path, spec, halving, created_at) VALUES (?1, ?2, ?3, ?4, ?5)");
    st.bind(1, sweep.name).bind(2, sweep.config_path).bind(3, sweep.spec_json).bind(4, sweep.halving_json);
    st.bind(5, sweep.created_at > 0 ? sweep.created_at : now_seconds());
    st.run();
  });
}

namespace {
Sweep read_sweep(const Stmt& st) {
  Sweep s;
  s.name = st.text(0);
  s.config_path = st.text(1);
  s.spec_json = st.text(2);
  s.halving_json = st.text(3);
  s.created_at = st.f64(4);
  return s;
}
}  // namespace

std::optional<Sweep> find_sweep(const Database& db, const std::string& name) {
  Stmt st(db, "SELECT name, config_path, spec, halving, created_at FROM sweeps WHERE name = ?1");
  st.bind(1, name);
  if (!st.step()) return std::nullopt;
  return read_sweep(st);
}

std::vector<Sweep> list_sweeps(const Database& db) {
  Stmt st(db, "SELECT name, config_path, spec, halving, created_at FROM sweeps ORDER BY created_at, name");
  std::vector<Sweep> out;
  while (st.step()) out.push_back(read_sweep(st));
  return out;
}

}  // namespace flotilla::db
