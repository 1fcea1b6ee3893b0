// Runs and nodes (see run_store.h; the state machine is documented in docs/store.md).
#include "db/run_store.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "db/costs.h"
#include "db/errors.h"
#include "db/sql.h"
#include "engine/core/clock.h"

namespace flotilla::db {
namespace {

constexpr const char* kStatusNames[] = {"created",   "queued",  "running", "paused",
                                        "preempted", "stopped", "failed",  "completed"};

constexpr const char* kRunColumns =
    "id, name, status, config_toml, config_json, target, run_dir, parent_id, parent_kind, notes, created_at, "
    "started_at, ended_at, exit_code, world_size, parameters, flops_per_token, summary_json, budget_usd, "
    "budget_warn_fraction, usd_per_hour, price_source, max_hours, status_note";

Run read_run(const Stmt& st) {
  Run r;
  r.id = st.i64(0);
  r.name = st.text(1);
  r.status = parse_run_status(st.text(2));
  r.config_toml = st.text(3);
  r.config_json = st.text(4);
  r.target = st.text(5);
  r.run_dir = st.text(6);
  r.parent_id = st.opt_i64(7);
  r.parent_kind = st.text(8);
  r.notes = st.text(9);
  r.created_at = st.f64(10);
  r.started_at = st.opt_f64(11);
  r.ended_at = st.opt_f64(12);
  r.exit_code = st.opt_i64(13);
  r.world_size = st.opt_i64(14);
  r.parameters = st.opt_i64(15);
  r.flops_per_token = st.opt_f64(16);
  r.summary_json = st.text(17);
  r.budget_usd = st.opt_f64(18);
  r.budget_warn_fraction = st.f64(19);
  r.usd_per_hour = st.opt_f64(20);
  r.price_source = st.text(21);
  r.max_hours = st.opt_f64(22);
  r.status_note = st.text(23);
  return r;
}

void load_tags(const Database& db, Run& r) {
  Stmt st(db, "SELECT tag FROM run_tags WHERE run_id = ?1 ORDER BY tag");
  st.bind(1, r.id);
  while (st.step()) r.tags.push_back(st.text(0));
}

std::optional<Run> run_where(const Database& db, const std::string& where, const std::string& arg,
                             int64_t id) {
  Stmt st(db, std::string("SELECT ") + kRunColumns + " FROM runs WHERE " + where);
  if (where.find("?1") != std::string::npos) {
    if (arg.empty())
      st.bind(1, id);
    else
      st.bind(1, arg);
  }
  if (!st.step()) return std::nullopt;
  Run r = read_run(st);
  load_tags(db, r);
  return r;
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
}

void check_changed(const Database& db, int64_t run_id) {
  if (changes_count(db) == 0)
    throw DbError(DbErrorKind::kNotFound, "run " + std::to_string(run_id) + " does not exist");
}

}  // namespace

const char* to_string(RunStatus s) { return kStatusNames[static_cast<int>(s)]; }

RunStatus parse_run_status(const std::string& name) {
  for (int i = 0; i < 8; ++i)
    if (name == kStatusNames[i]) return static_cast<RunStatus>(i);
  throw DbError(DbErrorKind::kInvalid, "unknown run status '" + name +
                                           "' (one of created, queued, running, paused, preempted, stopped, "
                                           "failed, completed)");
}

bool is_terminal(RunStatus s) { return s == RunStatus::kCompleted; }

bool transition_allowed(RunStatus from, RunStatus to) {
  using S = RunStatus;
  if (from == to) return true;
  switch (from) {
    case S::kCreated:
      return to == S::kQueued || to == S::kRunning || to == S::kStopped || to == S::kFailed;
    case S::kQueued:
      return to == S::kRunning || to == S::kStopped || to == S::kFailed;
    case S::kRunning:
      return to == S::kPaused || to == S::kPreempted || to == S::kStopped || to == S::kFailed ||
             to == S::kCompleted;
    case S::kPaused:
    case S::kPreempted:
    case S::kStopped:
    case S::kFailed:
      return to == S::kQueued || to == S::kRunning || (to == S::kStopped && from != S::kFailed) ||
             (to == S::kFailed && from != S::kStopped && from != S::kFailed);
    case S::kCompleted:
      return false;
  }
  return false;
}

int64_t create_run(Database& db, const NewRun& run) {
  if (run.name.empty()) throw DbError(DbErrorKind::kInvalid, "a run needs a name");
  if (run.budget_warn_fraction <= 0 || run.budget_warn_fraction > 1)
    throw DbError(DbErrorKind::kInvalid, "budget warning fraction must be in (0, 1], got " +
                                             std::to_string(run.budget_warn_fraction));
  if (run.max_hours && !(*run.max_hours > 0))
    throw DbError(DbErrorKind::kInvalid, "a run's max_hours must be > 0");
  int64_t id = 0;
  write_tx(db, [&] {
    if (find_run(db, run.name))
      throw DbError(DbErrorKind::kConstraint,
                    "a run named '" + run.name + "' already exists: choose another name (or resume it)");
    Stmt st(
        db,
        "INSERT INTO runs(name, config_toml, config_json, target, run_dir, notes, created_at, budget_usd, "
        "budget_warn_fraction, max_hours) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)");
    st.bind(1, run.name).bind(2, run.config_toml).bind(3, run.config_json.empty() ? "{}" : run.config_json);
    st.bind(4, run.target).bind(5, run.run_dir).bind(6, run.notes);
    st.bind(7, run.created_at > 0 ? run.created_at : now_seconds()).bind(8, run.budget_usd);
    st.bind(9, run.budget_warn_fraction).bind(10, run.max_hours);
    st.run();
    id = last_insert_id(db);
    if (!run.tags.empty()) set_tags(db, id, run.tags);
    add_event(db, id, run.created_at > 0 ? run.created_at : now_seconds(), "status", "info", "created");
  });
  return id;
}

std::string unique_run_name(const Database& db, const std::string& base) {
  if (!find_run(db, base)) return base;
  for (int n = 2;; ++n) {
    const std::string candidate = base + "-" + std::to_string(n);
    if (!find_run(db, candidate)) return candidate;
  }
}

std::optional<Run> find_run(const Database& db, const std::string& name_or_id) {
  if (auto r = run_where(db, "name = ?1", name_or_id, 0)) return r;
  if (all_digits(name_or_id) && name_or_id.size() < 18)
    return run_where(db, "id = ?1", "", std::stoll(name_or_id));
  return std::nullopt;
}

Run get_run(const Database& db, const std::string& name_or_id) {
  if (auto r = find_run(db, name_or_id)) return *r;
  throw DbError(DbErrorKind::kNotFound,
                "no run named '" + name_or_id + "' in " + db.path() + " (flotilla runs list shows the runs)");
}

Run get_run(const Database& db, int64_t id) {
  if (auto r = run_where(db, "id = ?1", "", id)) return *r;
  throw DbError(DbErrorKind::kNotFound, "run " + std::to_string(id) + " does not exist in " + db.path());
}

RunStatus set_status(Database& db, int64_t run_id, RunStatus to, double at, const std::string& reason,
                     std::optional<int64_t> exit_code, const std::string& note, double at_boot) {
  if (at <= 0) {
    at = now_seconds();
    at_boot = clk::boot_now();
  }
  RunStatus from = to;
  write_tx(db, [&] {
    const Run r = get_run(db, run_id);
    from = r.status;
    if (!transition_allowed(from, to))
      throw DbError(DbErrorKind::kInvalid, "run '" + r.name + "' cannot go from " + to_string(from) + " to " +
                                               to_string(to) + " (docs/store.md shows the allowed changes)");
    if (exit_code) {
      Stmt st(db, "UPDATE runs SET exit_code = ?2 WHERE id = ?1");
      st.bind(1, run_id).bind(2, *exit_code).run();
    }
    if (from == to) {
      if (!note.empty()) {
        Stmt n(db, "UPDATE runs SET status_note = ?2 WHERE id = ?1");
        n.bind(1, run_id).bind(2, note).run();
      }
      return;
    }
    Stmt st(db,
            "UPDATE runs SET status = ?2, "
            "started_at = CASE WHEN ?2 = 'running' AND started_at IS NULL THEN ?3 ELSE started_at END, "
            "ended_at = CASE WHEN ?2 = 'running' THEN NULL "
            "                WHEN ?2 IN ('paused','preempted','stopped','failed','completed') THEN ?3 "
            "                ELSE ended_at END, status_note = ?4 WHERE id = ?1");
    st.bind(1, run_id).bind(2, to_string(to)).bind(3, at).bind(4, note).run();
    split_accruals(db, run_id, to, at, at_boot);
    std::string message = std::string(to_string(from)) + " -> " + to_string(to);
    if (!reason.empty()) message += ": " + reason;
    add_event(db, run_id, at, "status", to == RunStatus::kFailed ? "error" : "info", message);
  });
  return from;
}

void set_notes(Database& db, int64_t run_id, const std::string& notes) {
  write_tx(db, [&] {
    Stmt st(db, "UPDATE runs SET notes = ?2 WHERE id = ?1");
    st.bind(1, run_id).bind(2, notes).run();
    check_changed(db, run_id);
  });
}

void set_tags(Database& db, int64_t run_id, const std::vector<std::string>& tags) {
  write_tx(db, [&] {
    Stmt del(db, "DELETE FROM run_tags WHERE run_id = ?1");
    del.bind(1, run_id).run();
    Stmt ins(db, "INSERT OR IGNORE INTO run_tags(run_id, tag) VALUES (?1, ?2)");
    for (const std::string& t : tags) {
      if (t.empty()) continue;
      ins.bind(1, run_id).bind(2, t).run();
      ins.reset();
    }
  });
}

void set_budget(Database& db, int64_t run_id, std::optional<double> cap_usd, double warn_fraction) {
  if (warn_fraction <= 0 || warn_fraction > 1)
    throw DbError(DbErrorKind::kInvalid,
                  "budget warning fraction must be in (0, 1], got " + std::to_string(warn_fraction));
  write_tx(db, [&] {
    Stmt st(db, "UPDATE runs SET budget_usd = ?2, budget_warn_fraction = ?3 WHERE id = ?1");
    st.bind(1, run_id).bind(2, cap_usd).bind(3, warn_fraction).run();
    check_changed(db, run_id);
  });
}

void set_max_hours(Database& db, int64_t run_id, std::optional<double> max_hours) {
  if (max_hours && !(*max_hours > 0))
    throw DbError(DbErrorKind::kInvalid, "a run's max_hours must be > 0, got " + std::to_string(*max_hours));
  write_tx(db, [&] {
    Stmt st(db, "UPDATE runs SET max_hours = ?2 WHERE id = ?1");
    st.bind(1, run_id).bind(2, max_hours).run();
    check_changed(db, run_id);
  });
}

void set_run_config(Database& db, int64_t run_id, const std::string& config_toml,
                    const std::string& config_json) {
  write_tx(db, [&] {
    Stmt st(db, "UPDATE runs SET config_toml = ?2, config_json = ?3 WHERE id = ?1");
    st.bind(1, run_id).bind(2, config_toml).bind(3, config_json.empty() ? "{}" : config_json).run();
    check_changed(db, run_id);
  });
}

void record_run_facts(Database& db, int64_t run_id, int64_t world_size, int64_t parameters,
                      double flops_per_token, const std::string& config_json) {
  Stmt st(db,
          "UPDATE runs SET world_size = ?2, parameters = ?3, flops_per_token = ?4, "
          "config_json = CASE WHEN ?5 <> '' AND config_json IN ('', '{}') THEN ?5 ELSE config_json END "
          "WHERE id = ?1");
  st.bind(1, run_id)
      .bind(2, world_size)
      .bind(3, parameters)
      .bind(4, flops_per_token)
      .bind(5, config_json)
      .run();
}

void set_run_summary(Database& db, int64_t run_id, const std::string& summary_json) {
  Stmt st(db, "UPDATE runs SET summary_json = ?2 WHERE id = ?1");
  st.bind(1, run_id).bind(2, summary_json).run();
}

std::string canonical_run_dir(const std::string& run_dir) {
  namespace fs = std::filesystem;
  if (run_dir.empty() || run_dir[0] != '/') return run_dir;
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::path(run_dir), ec);
  if (ec) p = fs::path(run_dir);  // unreadable parents: fold the spelling at least
  std::string out = p.lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

std::optional<Run> find_run_by_dir(const Database& db, const std::string& run_dir) {
  if (run_dir.empty()) return std::nullopt;
  if (auto r = run_where(db, "run_dir = ?1", run_dir, 0)) return r;
  const std::string want = canonical_run_dir(run_dir);
  if (want[0] != '/') return std::nullopt;  // a remote folder: only its exact spelling is known
  if (want != run_dir)
    if (auto r = run_where(db, "run_dir = ?1", want, 0)) return r;
  // Rows stored in another spelling (older rows, or a folder that is now reached through a
  // symlink): compare them canonicalized too.
  Stmt st(db, "SELECT id, run_dir FROM runs WHERE substr(run_dir, 1, 1) = '/' ORDER BY id");
  while (st.step())
    if (canonical_run_dir(st.text(1)) == want) return run_where(db, "id = ?1", "", st.i64(0));
  return std::nullopt;
}

std::optional<Run> find_run_nested_with(const Database& db, const std::string& run_dir) {
  if (run_dir.empty()) return std::nullopt;
  const std::string want = canonical_run_dir(run_dir);
  if (want[0] != '/') return std::nullopt;
  const auto inside = [](const std::string& path, const std::string& dir) {
    return path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 && path[dir.size()] == '/';
  };
  Stmt st(db, "SELECT id, run_dir FROM runs WHERE substr(run_dir, 1, 1) = '/' ORDER BY id");
  while (st.step()) {
    const std::string have = canonical_run_dir(st.text(1));
    if (have != "/" && (inside(want, have) || inside(have, want)))
      return run_where(db, "id = ?1", "", st.i64(0));
  }
  return std::nullopt;
}

void set_run_dir(Database& db, int64_t run_id, const std::string& run_dir) {
  write_tx(db, [&] {
    Stmt st(db, "UPDATE runs SET run_dir = ?2 WHERE id = ?1");
    st.bind(1, run_id).bind(2, run_dir).run();
    check_changed(db, run_id);
  });
}

int64_t fork_run(Database& db, int64_t parent_id, const std::string& name) {
  int64_t id = 0;
  write_tx(db, [&] {
    const Run parent = get_run(db, parent_id);
    NewRun n;
    n.name = name;
    n.config_toml = parent.config_toml;
    n.config_json = parent.config_json;
    n.target = parent.target;
    n.tags = parent.tags;
    n.budget_usd = parent.budget_usd;
    n.budget_warn_fraction = parent.budget_warn_fraction;
    n.max_hours = parent.max_hours;
    id = create_run(db, n);
    Stmt st(db, "UPDATE runs SET parent_id = ?2, parent_kind = 'fork' WHERE id = ?1");
    st.bind(1, id).bind(2, parent_id).run();
  });
  return id;
}

int64_t delete_run(Database& db, int64_t run_id) {
  int64_t rows = 0;
  write_tx(db, [&] {
    Stmt count(db, "SELECT coalesce(sum(count), 0) FROM metric_blocks WHERE run_id = ?1");
    count.bind(1, run_id);
    count.step();
    rows = count.i64(0);
    Stmt st(db, "DELETE FROM runs WHERE id = ?1");
    st.bind(1, run_id).run();
    check_changed(db, run_id);
  });
  return rows;
}

void add_event(Database& db, std::optional<int64_t> run_id, double time, const std::string& kind,
               const std::string& level, const std::string& message, const std::string& fields_json,
               int rank) {
  const std::string lvl = (level == "warning" || level == "error") ? level : "info";
  Stmt st(db,
          "INSERT OR IGNORE INTO events(run_id, time, kind, level, rank, message, fields) "
          "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)");
  st.bind(1, run_id).bind(2, time).bind(3, kind).bind(4, lvl).bind(5, rank).bind(6, message);
  st.bind(7, fields_json.empty() ? "{}" : fields_json).run();
}

int64_t ensure_node(Database& db, const std::string& name, const std::string& kind,
                    const std::string& gpu_type, int64_t gpu_count, const std::string& host) {
  if (auto n = find_node(db, name)) return n->id;
  int64_t id = 0;
  write_tx(db, [&] {
    Stmt st(db,
            "INSERT INTO nodes(name, kind, host, gpu_type, gpu_count, created_at) VALUES (?1, ?2, ?3, ?4, "
            "?5, ?6)");
    st.bind(1, name).bind(2, kind).bind(3, host).bind(4, gpu_type).bind(5, gpu_count).bind(6, now_seconds());
    st.run();
    id = last_insert_id(db);
  });
  return id;
}

std::optional<Node> find_node(const Database& db, const std::string& name) {
  Stmt st(db, "SELECT id, name, kind, host, gpu_type, gpu_count, cluster_id FROM nodes WHERE name = ?1");
  st.bind(1, name);
  if (!st.step()) return std::nullopt;
  return Node{st.i64(0), st.text(1), st.text(2), st.text(3), st.text(4), st.i64(5), st.opt_i64(6)};
}

std::vector<Node> list_nodes(const Database& db) {
  std::vector<Node> out;
  Stmt st(db, "SELECT id, name, kind, host, gpu_type, gpu_count, cluster_id FROM nodes ORDER BY name");
  while (st.step())
    out.push_back(Node{st.i64(0), st.text(1), st.text(2), st.text(3), st.text(4), st.i64(5), st.opt_i64(6)});
  return out;
}

void attach_node(Database& db, int64_t run_id, int64_t node_id, int64_t devices) {
  write_tx(db, [&] {
    Stmt st(db,
            "INSERT INTO run_nodes(run_id, node_id, devices, position) VALUES (?1, ?2, ?3, "
            "(SELECT COALESCE(MAX(position) + 1, 0) FROM run_nodes WHERE run_id = ?1)) "
            "ON CONFLICT(run_id, node_id) DO UPDATE SET devices = excluded.devices");
    st.bind(1, run_id).bind(2, node_id).bind(3, devices < 1 ? 1 : devices).run();
  });
}

void detach_node(Database& db, int64_t run_id, int64_t node_id) {
  write_tx(db, [&] {
    Stmt st(db, "DELETE FROM run_nodes WHERE run_id = ?1 AND node_id = ?2");
    st.bind(1, run_id).bind(2, node_id).run();
  });
}

void set_run_target(Database& db, int64_t run_id, const std::string& target) {
  write_tx(db, [&] {
    Stmt st(db, "UPDATE runs SET target = ?2 WHERE id = ?1");
    st.bind(1, run_id).bind(2, target).run();
  });
}

}  // namespace flotilla::db
