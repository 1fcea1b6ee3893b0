// SSH nodes and system samples (see nodes.h).
#include "db/nodes.h"

#include "db/costs.h"
#include "db/errors.h"
#include "db/sql.h"

namespace flotilla::db {
namespace {

constexpr const char* kSelect =
    "SELECT n.id, n.name, n.host, n.port, n.user, n.key_path, p.usd_per_hour, COALESCE(p.spot, 0), n.labels, "
    "n.gpu_type, n.gpu_count, n.created_at FROM nodes n LEFT JOIN node_pricing p ON p.node_id = n.id "
    "WHERE n.kind = 'ssh'";

SshNode read_node(const Stmt& st) {
  SshNode n;
  n.id = st.i64(0);
  n.name = st.text(1);
  n.host = st.text(2);
  n.port = static_cast<int>(st.i64(3));
  n.user = st.text(4);
  n.key_path = st.text(5);
  n.usd_per_hour = st.opt_f64(6);
  n.spot = st.i64(7) != 0;
  n.labels = split_labels(st.text(8));
  n.gpu_type = st.text(9);
  n.gpu_count = st.i64(10);
  n.created_at = st.f64(11);
  return n;
}

void write_pricing(Database& db, int64_t id, const SshNode& node) {
  NodePricing np;
  if (auto old = node_pricing(db, id)) np = *old;
  np.usd_per_hour = node.usd_per_hour;
  np.spot = node.spot;
  set_node_pricing(db, id, np);
}

SystemSample read_sample(const Stmt& st) {
  SystemSample s;
  s.node_id = st.i64(0);
  s.device = static_cast<int>(st.i64(1));
  s.time = st.f64(2);
  s.utilization = st.opt_f64(3);
  s.memory_used = st.opt_i64(4);
  s.memory_total = st.opt_i64(5);
  s.power_w = st.opt_f64(6);
  s.temperature_c = st.opt_f64(7);
  return s;
}

}  // namespace

std::string join_labels(const std::vector<std::string>& labels) {
  std::string out;
  for (const auto& l : labels) {
    if (l.empty()) continue;
    if (!out.empty()) out += ',';
    out += l;
  }
  return out;
}

std::vector<std::string> split_labels(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string part =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!part.empty()) out.push_back(part);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

int64_t add_ssh_node(Database& db, const SshNode& node) {
  int64_t id = 0;
  write_tx(db, [&] {
    Stmt st(
        db,
        "INSERT INTO nodes(name, kind, host, port, user, key_path, labels, gpu_type, gpu_count, created_at) "
        "VALUES (?1, 'ssh', ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
    st.bind(1, node.name).bind(2, node.host).bind(3, node.port).bind(4, node.user).bind(5, node.key_path);
    st.bind(6, join_labels(node.labels)).bind(7, node.gpu_type).bind(8, node.gpu_count);
    st.bind(9, node.created_at > 0 ? node.created_at : now_seconds());
    st.run();
    id = last_insert_id(db);
    write_pricing(db, id, node);
  });
  return id;
}

void update_ssh_node(Database& db, const std::string& name, const SshNode& node) {
  write_tx(db, [&] {
    const SshNode old = get_ssh_node(db, name);
    Stmt st(db,
            "UPDATE nodes SET name = ?2, host = ?3, port = ?4, user = ?5, key_path = ?6, labels = ?7 WHERE "
            "id = ?1");
    st.bind(1, old.id).bind(2, node.name).bind(3, node.host).bind(4, node.port).bind(5, node.user);
    st.bind(6, node.key_path).bind(7, join_labels(node.labels)).run();
    write_pricing(db, old.id, node);
  });
}

void remove_node(Database& db, const std::string& name) {
  write_tx(db, [&] {
    Stmt find(db, "SELECT id FROM nodes WHERE name = ?1");
    find.bind(1, name);
    if (!find.step())
      throw DbError(DbErrorKind::kNotFound, "no node named '" + name + "' (flotilla nodes list shows them)");
    const int64_t id = find.i64(0);
    Stmt used(
        db,
        "SELECT r.name FROM runs r WHERE r.id IN (SELECT run_id FROM run_nodes WHERE node_id = ?1 UNION "
        "SELECT run_id FROM cost_accruals WHERE node_id = ?1) ORDER BY r.id LIMIT 3");
    used.bind(1, id);
    std::string runs;
    while (used.step()) runs += (runs.empty() ? "" : ", ") + used.text(0);
    if (!runs.empty())
      throw DbError(DbErrorKind::kConstraint, "node '" + name + "' is recorded in runs (" + runs +
                                                  "); delete those runs first (flotilla runs delete RUN)");
    Stmt del(db, "DELETE FROM nodes WHERE id = ?1");
    del.bind(1, id).run();
  });
}

std::optional<SshNode> find_ssh_node(const Database& db, const std::string& name) {
  Stmt st(db, std::string(kSelect) + " AND n.name = ?1");
  st.bind(1, name);
  if (!st.step()) return std::nullopt;
  return read_node(st);
}

SshNode get_ssh_node(const Database& db, const std::string& name) {
  if (auto n = find_ssh_node(db, name)) return *n;
  throw DbError(
      DbErrorKind::kNotFound,
      "no ssh node named '" + name + "': flotilla nodes list shows them, flotilla nodes add NAME adds one");
}

std::vector<SshNode> list_ssh_nodes(const Database& db) {
  std::vector<SshNode> out;
  Stmt st(db, std::string(kSelect) + " ORDER BY n.name");
  while (st.step()) out.push_back(read_node(st));
  return out;
}

std::vector<SshNode> run_ssh_nodes(const Database& db, int64_t run_id) {
  std::vector<SshNode> out;
  Stmt st(db, std::string(kSelect) +
                  " AND n.id IN (SELECT node_id FROM run_nodes WHERE run_id = ?1) ORDER BY n.id");
  st.bind(1, run_id);
  while (st.step()) out.push_back(read_node(st));
  return out;
}

std::vector<RunNodeRef> list_run_nodes(const Database& db, int64_t run_id) {
  std::vector<RunNodeRef> out;
  Stmt st(db,
          "SELECT n.id, n.name, n.kind, rn.devices FROM run_nodes rn JOIN nodes n ON n.id = rn.node_id "
          "WHERE rn.run_id = ?1 ORDER BY rn.position, n.id");
  st.bind(1, run_id);
  while (st.step()) out.push_back(RunNodeRef{st.i64(0), st.text(1), st.text(2), st.i64(3)});
  return out;
}

void set_node_gpus(Database& db, int64_t node_id, const std::string& gpu_type, int64_t gpu_count) {
  write_tx(db, [&] {
    Stmt st(db, "UPDATE nodes SET gpu_type = ?2, gpu_count = ?3 WHERE id = ?1");
    st.bind(1, node_id).bind(2, gpu_type).bind(3, gpu_count).run();
  });
}

void set_node_gpu_count(Database& db, int64_t node_id, int64_t gpu_count) {
  write_tx(db, [&] {
    Stmt st(db, "UPDATE nodes SET gpu_count = ?2 WHERE id = ?1");
    st.bind(1, node_id).bind(2, gpu_count).run();
  });
}

void insert_system_samples(Database& db, const std::vector<SystemSample>& samples) {
  if (samples.empty()) return;
  write_tx(db, [&] {
    Stmt st(db,
            "INSERT OR REPLACE INTO system_samples(node_id, device, time, utilization, memory_used, "
            "memory_total, "
            "power_w, temperature_c) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
    for (const auto& s : samples) {
      st.bind(1, s.node_id).bind(2, s.device).bind(3, s.time).bind(4, s.utilization).bind(5, s.memory_used);
      st.bind(6, s.memory_total).bind(7, s.power_w).bind(8, s.temperature_c).run();
      st.reset();
    }
  });
}

std::vector<SystemSample> system_samples(const Database& db, int64_t node_id, double since) {
  std::vector<SystemSample> out;
  Stmt st(db,
          "SELECT node_id, device, time, utilization, memory_used, memory_total, power_w, temperature_c FROM "
          "system_samples WHERE node_id = ?1 AND time >= ?2 ORDER BY time, device");
  st.bind(1, node_id).bind(2, since);
  while (st.step()) out.push_back(read_sample(st));
  return out;
}

std::vector<SystemSample> latest_system_samples(const Database& db, int64_t node_id) {
  std::vector<SystemSample> out;
  Stmt st(db,
          "SELECT s.node_id, s.device, s.time, s.utilization, s.memory_used, s.memory_total, s.power_w, "
          "s.temperature_c FROM system_samples s WHERE s.node_id = ?1 AND s.time = (SELECT MAX(time) FROM "
          "system_samples t WHERE t.node_id = s.node_id AND t.device = s.device) ORDER BY s.device");
  st.bind(1, node_id);
  while (st.step()) out.push_back(read_sample(st));
  return out;
}

void upsert_node_latency(Database& db, const std::vector<NodeLatency>& rows) {
  for (const auto& r : rows)
    if ((!r.rtt_ms && r.error.empty()) || (r.rtt_ms && *r.rtt_ms < 0))
      throw DbError(DbErrorKind::kInvalid, "latency from node " + std::to_string(r.from_node) + " to node " +
                                               std::to_string(r.to_node) +
                                               " has neither a time >= 0 nor an error");
  if (rows.empty()) return;
  write_tx(db, [&] {
    Stmt st(db,
            "INSERT OR REPLACE INTO node_latency(from_node, to_node, rtt_ms, error, measured_at) "
            "VALUES (?1, ?2, ?3, ?4, ?5)");
    for (const auto& r : rows) {
      st.bind(1, r.from_node).bind(2, r.to_node).bind(3, r.rtt_ms);
      if (r.error.empty())
        st.bind_null(4);
      else
        st.bind(4, r.error);
      st.bind(5, r.measured_at > 0 ? r.measured_at : now_seconds()).run();
      st.reset();
    }
  });
}

std::vector<NodeLatency> node_latency_matrix(const Database& db, const std::vector<int64_t>& node_ids) {
  std::vector<NodeLatency> out;
  Stmt st(
      db,
      "SELECT from_node, to_node, rtt_ms, error, measured_at FROM node_latency ORDER BY from_node, to_node");
  auto wanted = [&](int64_t id) {
    if (node_ids.empty()) return true;
    for (int64_t n : node_ids)
      if (n == id) return true;
    return false;
  };
  while (st.step()) {
    NodeLatency r;
    r.from_node = st.i64(0);
    r.to_node = st.i64(1);
    if (!wanted(r.from_node) || !wanted(r.to_node)) continue;
    r.rtt_ms = st.opt_f64(2);
    r.error = st.text(3);
    r.measured_at = st.f64(4);
    out.push_back(r);
  }
  return out;
}

}  // namespace flotilla::db
