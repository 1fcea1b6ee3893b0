// Link matrices on the collective path (see links.h).
#include "db/links.h"

#include <algorithm>
#include <set>
#include <utility>

#include "db/errors.h"
#include "db/sql.h"

namespace flotilla::db {
namespace {

void check(const LinkMeasurement& m) {
  if (m.transport.empty()) throw DbError(DbErrorKind::kInvalid, "a link measurement needs its transport");
  if (m.seconds < 0) throw DbError(DbErrorKind::kInvalid, "a link measurement cannot take negative seconds");
  std::set<std::pair<int64_t, int64_t>> seen;
  for (const auto& l : m.links) {
    const std::string which = "link from node " + std::to_string(l.from_node) + " to node " + std::to_string(l.to_node);
    if (!seen.insert({l.from_node, l.to_node}).second)
      throw DbError(DbErrorKind::kInvalid, which + " appears twice in one measurement");
    const bool figures = l.latency_s.has_value() && l.bytes_per_s.has_value();
    if (!figures && l.error.empty())
      throw DbError(DbErrorKind::kInvalid, which + " has neither a latency and a bandwidth nor an error");
    if ((l.latency_s && *l.latency_s < 0) || (l.bytes_per_s && !(*l.bytes_per_s > 0)))
      throw DbError(DbErrorKind::kInvalid, which + " has a negative latency or a bandwidth not above 0");
  }
}

constexpr const char* kSelectMeasurement =
    "SELECT id, measured_at, transport, run_id, seconds, note FROM link_measurements ";

LinkMeasurement read_measurement(const Database& db, const Stmt& st) {
  LinkMeasurement m;
  m.id = st.i64(0);
  m.measured_at = st.f64(1);
  m.transport = st.text(2);
  m.run_id = st.opt_i64(3);
  m.seconds = st.f64(4);
  m.note = st.text(5);
  Stmt links(db,
             "SELECT from_node, to_node, latency_s, bytes_per_s, error FROM node_links WHERE measurement_id = ?1 "
             "ORDER BY from_node, to_node");
  links.bind(1, m.id);
  while (links.step()) {
    NodeLink l;
    l.from_node = links.i64(0);
    l.to_node = links.i64(1);
    l.latency_s = links.opt_f64(2);
    l.bytes_per_s = links.opt_f64(3);
    l.error = links.text(4);
    l.measured_at = m.measured_at;
    l.measurement_id = m.id;
    m.links.push_back(std::move(l));
  }
  return m;
}

std::optional<LinkMeasurement> first_measurement(const Database& db, const std::string& tail,
                                                 std::optional<int64_t> param) {
  Stmt st(db, std::string(kSelectMeasurement) + tail);
  if (param) st.bind(1, *param);
  if (!st.step()) return std::nullopt;
  return read_measurement(db, st);
}

}  // namespace

int64_t store_link_measurement(Database& db, const LinkMeasurement& m) {
  check(m);
  int64_t id = 0;
  write_tx(db, [&] {
    Stmt st(db,
            "INSERT INTO link_measurements(measured_at, transport, run_id, seconds, note) VALUES (?1, ?2, ?3, ?4, ?5)");
    st.bind(1, m.measured_at > 0 ? m.measured_at : now_seconds()).bind(2, m.transport).bind(3, m.run_id);
    st.bind(4, m.seconds).bind(5, m.note).run();
    id = last_insert_id(db);
    Stmt link(db,
              "INSERT INTO node_links(measurement_id, from_node, to_node, latency_s, bytes_per_s, error) "
              "VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
    for (const auto& l : m.links) {
      link.bind(1, id).bind(2, l.from_node).bind(3, l.to_node).bind(4, l.latency_s).bind(5, l.bytes_per_s);
      if (l.error.empty())
        link.bind_null(6);
      else
        link.bind(6, l.error);
      link.run();
      link.reset();
    }
  });
  return id;
}

std::optional<LinkMeasurement> link_measurement(const Database& db, int64_t id) {
  return first_measurement(db, "WHERE id = ?1", id);
}

std::optional<LinkMeasurement> run_link_measurement(const Database& db, int64_t run_id) {
  return first_measurement(db, "WHERE run_id = ?1 ORDER BY measured_at DESC, id DESC LIMIT 1", run_id);
}

std::optional<LinkMeasurement> latest_link_measurement(const Database& db) {
  return first_measurement(db, "ORDER BY measured_at DESC, id DESC LIMIT 1", std::nullopt);
}

std::vector<NodeLink> latest_links(const Database& db, const std::vector<int64_t>& node_ids) {
  // Newest first; per pair keep the first row with figures, else the first (newest) error.
  Stmt st(db,
          "SELECT l.from_node, l.to_node, l.latency_s, l.bytes_per_s, l.error, m.measured_at, m.id "
          "FROM node_links l JOIN link_measurements m ON m.id = l.measurement_id "
          "ORDER BY m.measured_at DESC, m.id DESC");
  auto wanted = [&](int64_t id) {
    return node_ids.empty() || std::find(node_ids.begin(), node_ids.end(), id) != node_ids.end();
  };
  std::vector<NodeLink> out;
  auto find = [&](int64_t from, int64_t to) -> NodeLink* {
    for (auto& l : out)
      if (l.from_node == from && l.to_node == to) return &l;
    return nullptr;
  };
  while (st.step()) {
    NodeLink l;
    l.from_node = st.i64(0);
    l.to_node = st.i64(1);
    if (!wanted(l.from_node) || !wanted(l.to_node)) continue;
    l.latency_s = st.opt_f64(2);
    l.bytes_per_s = st.opt_f64(3);
    l.error = st.text(4);
    l.measured_at = st.f64(5);
    l.measurement_id = st.i64(6);
    NodeLink* have = find(l.from_node, l.to_node);
    if (have == nullptr) {
      out.push_back(std::move(l));
    } else if (!have->error.empty() && l.error.empty()) {
      *have = std::move(l);  // an older figure beats a newer error
    }
  }
  std::sort(out.begin(), out.end(), [](const NodeLink& a, const NodeLink& b) {
    return std::pair(a.from_node, a.to_node) < std::pair(b.from_node, b.to_node);
  });
  return out;
}

}  // namespace flotilla::db
