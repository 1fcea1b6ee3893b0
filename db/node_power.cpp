// node_power and idle_accruals (see node_power.h).
#include "db/node_power.h"

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "db/errors.h"
#include "db/sql.h"

namespace flotilla::db {
namespace {

constexpr const char* kPowerColumns =
    "p.node_id, n.name, p.idle_limit_s, p.stop_argv, p.start_argv, p.state, p.since, p.idle_since";

NodePower read_power(const Stmt& st) {
  NodePower p;
  p.node_id = st.i64(0);
  p.node_name = st.text(1);
  p.idle_limit_s = st.opt_f64(2);
  p.stop_argv = argv_from_json(st.text(3));
  p.start_argv = argv_from_json(st.text(4));
  p.state = st.text(5);
  p.since = st.f64(6);
  p.idle_since = st.opt_f64(7);
  return p;
}

bool known_state(const std::string& s) {
  return s == kPowerOn || s == kPowerStopping || s == kPowerStopped || s == kPowerStarting;
}

}  // namespace

std::string argv_to_json(const std::vector<std::string>& argv) {
  try {
    return nlohmann::json(argv).dump();
  } catch (const nlohmann::json::exception&) {  // JSON text holds UTF-8 only
    throw DbError(DbErrorKind::kInvalid, "a command argument is not valid UTF-8 text");
  }
}

std::vector<std::string> argv_from_json(const std::string& text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_array()) throw DbError(DbErrorKind::kInvalid, "a stored command is not a JSON array: " + text);
  std::vector<std::string> out;
  for (const auto& a : j) {
    if (!a.is_string())
      throw DbError(DbErrorKind::kInvalid, "a stored command has a non-text argument: " + text);
    out.push_back(a.get<std::string>());
  }
  return out;
}

void set_node_power(Database& db, const NodePower& s) {
  write_tx(db, [&] {
    Stmt n(db, "SELECT 1 FROM nodes WHERE id = ?1");
    n.bind(1, s.node_id);
    if (!n.step())
      throw DbError(DbErrorKind::kNotFound, "node " + std::to_string(s.node_id) + " does not exist");
    Stmt st(db,
            "INSERT INTO node_power(node_id, idle_limit_s, stop_argv, start_argv, state, since) "
            "VALUES (?1, ?2, ?3, ?4, 'on', ?5) ON CONFLICT(node_id) DO UPDATE SET "
            "idle_limit_s = excluded.idle_limit_s, stop_argv = excluded.stop_argv, "
            "start_argv = excluded.start_argv");
    st.bind(1, s.node_id).bind(2, s.idle_limit_s).bind(3, argv_to_json(s.stop_argv));
    st.bind(4, argv_to_json(s.start_argv)).bind(5, now_seconds()).run();
  });
}

bool clear_idle_limit(Database& db, int64_t node_id) {
  bool changed = false;
  write_tx(db, [&] {
    Stmt st(db, "UPDATE node_power SET idle_limit_s = NULL, idle_since = NULL WHERE node_id = ?1");
    st.bind(1, node_id).run();
    changed = changes_count(db) > 0;
  });
  return changed;
}

std::optional<NodePower> node_power(const Database& db, int64_t node_id) {
  Stmt st(db, std::string("SELECT ") + kPowerColumns +
                  " FROM node_power p JOIN nodes n ON n.id = p.node_id WHERE p.node_id = ?1");
  st.bind(1, node_id);
  if (!st.step()) return std::nullopt;
  return read_power(st);
}

std::vector<NodePower> list_node_power(const Database& db) {
  std::vector<NodePower> out;
  Stmt st(db, std::string("SELECT ") + kPowerColumns +
                  " FROM node_power p JOIN nodes n ON n.id = p.node_id ORDER BY n.name");
  while (st.step()) out.push_back(read_power(st));
  return out;
}

void set_power_state(Database& db, int64_t node_id, const std::string& state, double at) {
  if (!known_state(state)) throw DbError(DbErrorKind::kInvalid, "unknown node power state '" + state + "'");
  write_tx(db, [&] {
    Stmt st(db, "UPDATE node_power SET state = ?2, since = ?3 WHERE node_id = ?1");
    st.bind(1, node_id).bind(2, state).bind(3, at).run();
    if (changes_count(db) == 0)
      throw DbError(DbErrorKind::kNotFound, "node " + std::to_string(node_id) + " has no autostop settings");
  });
}

void set_idle_since(Database& db, int64_t node_id, std::optional<double> since) {
  write_tx(db, [&] {
    Stmt st(db, "UPDATE node_power SET idle_since = ?2 WHERE node_id = ?1");
    st.bind(1, node_id).bind(2, since).run();
  });
}

std::map<int64_t, double> nodes_with_running_runs(const Database& db) {
  std::map<int64_t, double> out;
  Stmt st(db,
          "SELECT rn.node_id, (SELECT min(a.start_time) FROM cost_accruals a WHERE a.node_id = rn.node_id "
          "AND a.end_time IS NULL) FROM run_nodes rn JOIN runs r ON r.id = rn.run_id "
          "WHERE r.status = 'running' GROUP BY rn.node_id");
  while (st.step()) out[st.i64(0)] = st.f64(1);
  return out;
}

bool open_idle_accrual(Database& db, int64_t node_id, double start, double usd_per_hour,
                       const std::string& note) {
  bool opened = false;
  write_tx(db, [&] {
    Stmt open(db, "SELECT 1 FROM idle_accruals WHERE node_id = ?1 AND end IS NULL");
    open.bind(1, node_id);
    if (open.step()) return;
    Stmt st(db, "INSERT INTO idle_accruals(node_id, start, usd_per_hour, note) VALUES (?1, ?2, ?3, ?4)");
    st.bind(1, node_id).bind(2, start).bind(3, usd_per_hour).bind(4, note).run();
    opened = true;
  });
  return opened;
}

bool close_idle_accrual(Database& db, int64_t node_id, double end, const std::string& note) {
  bool closed = false;
  write_tx(db, [&] {
    Stmt st(db,
            "UPDATE idle_accruals SET end = max(start, ?2), note = CASE WHEN ?3 = '' THEN note ELSE ?3 END "
            "WHERE node_id = ?1 AND end IS NULL");
    st.bind(1, node_id).bind(2, end).bind(3, note).run();
    closed = changes_count(db) > 0;
  });
  return closed;
}

std::vector<IdleAccrual> idle_accruals(const Database& db, double from, double to) {
  std::vector<IdleAccrual> out;
  Stmt st(
      db,
      "SELECT a.id, a.node_id, n.name, a.start, a.end, a.usd_per_hour, a.note FROM idle_accruals a "
      "JOIN nodes n ON n.id = a.node_id WHERE (?2 <= 0 OR a.start <= ?2) AND (a.end IS NULL OR a.end >= ?1) "
      "ORDER BY a.start, a.id");
  st.bind(1, from).bind(2, to);
  while (st.step())
    out.push_back({st.i64(0), st.i64(1), st.text(2), st.f64(3), st.opt_f64(4), st.f64(5), st.text(6)});
  return out;
}

std::vector<Accrual> idle_as_accruals(const std::vector<IdleAccrual>& rows, double from, double to) {
  std::vector<Accrual> out;
  for (const IdleAccrual& r : rows) {
    Accrual a;
    a.node_id = r.node_id;
    a.status = "idle";
    a.start = std::max(r.start, from);
    a.end = r.end;
    if (to > 0) a.end = std::min(r.end.value_or(to), to);
    if (a.end && *a.end < a.start) continue;  // outside the window
    a.usd_per_hour = r.usd_per_hour;
    a.rate_source = r.note;
    out.push_back(std::move(a));
  }
  return out;
}

std::vector<CostLine> idle_costs_by_node(const Database& db, double from, double to) {
  std::map<std::string, std::vector<Accrual>> by_node;
  const auto rows = idle_accruals(db, from, to);
  const auto accruals = idle_as_accruals(rows, from, to);
  std::map<int64_t, std::string> name_of;
  for (const IdleAccrual& r : rows) name_of[r.node_id] = r.node_name;
  for (const Accrual& a : accruals) by_node[name_of[a.node_id]].push_back(a);
  std::vector<CostLine> out;
  for (const auto& [name, list] : by_node) {
    CostLine l;
    l.key = name;
    l.usd = accrued_until(list, to, true);
    l.priced = any_priced(list);
    l.running_s = running_until(list, to);
    l.hours = l.running_s / 3600.0;
    out.push_back(std::move(l));
  }
  return out;
}

double idle_cost_usd(const Database& db, double from, double to) {
  return accrued_until(idle_as_accruals(idle_accruals(db, from, to), from, to), to, true);
}

std::vector<PowerEvent> power_events(const Database& db, double from, double to) {
  std::vector<PowerEvent> out;
  Stmt st(db,
          "SELECT time, level, message, fields FROM events WHERE run_id IS NULL AND kind = 'autostop' "
          "AND time >= ?1 AND (?2 <= 0 OR time <= ?2) ORDER BY time, id");
  st.bind(1, from).bind(2, to);
  while (st.step()) {
    PowerEvent e;
    e.time = st.f64(0);
    e.level = st.text(1);
    e.message = st.text(2);
    const nlohmann::json f = nlohmann::json::parse(st.text(3), nullptr, false);
    if (f.is_object()) {
      e.node = f.value("node", std::string());
      e.stopped = f.value("stopped", false);
      e.idle_s = f.value("idle_s", 0.0);
    }
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace flotilla::db
