// Implementation notes are in nodebridge.h.
#include "runs/node_bridge.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "db/run_store.h"

namespace flotilla::runs {

db::SshNode node_from_fields(const remote::NodeFields& f) {
  db::SshNode n;
  n.name = f.name;
  n.host = f.host;
  n.port = std::atoi(f.port.c_str());
  n.user = f.user;
  n.key_path = f.key_path.empty() ? "" : std::filesystem::absolute(f.key_path).lexically_normal().string();
  if (!f.price_per_hour.empty()) n.usd_per_hour = std::strtod(f.price_per_hour.c_str(), nullptr);
  n.spot = f.spot;
  n.labels = f.labels;
  return n;
}

remote::NodeFields fields_from_node(const db::SshNode& n) {
  remote::NodeFields f;
  f.name = n.name;
  f.host = n.host;
  f.port = std::to_string(n.port);
  f.user = n.user;
  f.key_path = n.key_path;
  if (n.usd_per_hour) {
    // Fixed notation (validate_price takes no exponent), trailing zeros trimmed: 3.6, not 3.6000.
    char buf[48];
    std::snprintf(buf, sizeof buf, "%.4f", *n.usd_per_hour);
    std::string p = buf;
    while (p.size() > 1 && p.back() == '0') p.pop_back();
    if (!p.empty() && p.back() == '.') p.pop_back();
    f.price_per_hour = p;
  }
  f.labels = n.labels;
  f.spot = n.spot;
  return f;
}

std::vector<db::SystemSample> samples_from_gpus(int64_t node_id, const std::vector<remote::GpuInfo>& gpus,
                                                double now) {
  std::vector<db::SystemSample> samples;
  for (const auto& g : gpus) {
    db::SystemSample s;
    s.node_id = node_id;
    s.device = g.index;
    s.time = now;
    if (g.utilization_pct >= 0) s.utilization = g.utilization_pct;
    s.memory_used = static_cast<int64_t>(g.memory_used_bytes);
    s.memory_total = static_cast<int64_t>(g.memory_total_bytes);
    if (g.power_w >= 0) s.power_w = g.power_w;
    if (g.temperature_c >= 0) s.temperature_c = g.temperature_c;
    samples.push_back(s);
  }
  return samples;
}

std::vector<db::NodeLatency> measure_and_store_latency(db::Database& db,
                                                       const std::vector<LatencyNode>& nodes, int count) {
  std::vector<remote::LatencyEndpoint> endpoints;
  for (const auto& n : nodes) {
    remote::LatencyEndpoint e;
    e.name = n.node.name;
    e.session = n.session;
    e.worker = n.worker;
    if (!n.session) {  // measured TO at its stored address
      e.host = n.node.host;
      e.port = n.node.port;
    }
    e.unavailable = n.unavailable;
    endpoints.push_back(e);
  }
  remote::LatencyOptions options;
  options.count = count;
  const remote::LatencyMatrix m = remote::measure_latency_matrix(endpoints, options);
  const double now = db::now_seconds();
  auto row = [now](int64_t from, int64_t to, const remote::LatencyCell& c) {
    db::NodeLatency r;
    r.from_node = from;
    r.to_node = to;
    if (c.error.empty() && c.median_ms >= 0)
      r.rtt_ms = c.median_ms;
    else
      r.error = c.error.empty() ? "not measured" : c.error;
    r.measured_at = now;
    return r;
  };
  std::vector<db::NodeLatency> rows;
  const int64_t here = db::ensure_node(db, "local", "local");
  for (size_t j = 0; j < nodes.size(); ++j) rows.push_back(row(here, nodes[j].node.id, m.from_here[j]));
  for (size_t i = 0; i < nodes.size(); ++i)
    for (size_t j = 0; j < nodes.size(); ++j)
      if (i != j) rows.push_back(row(nodes[i].node.id, nodes[j].node.id, m.at(i, j)));
  db::upsert_node_latency(db, rows);
  return rows;
}

}  // namespace flotilla::runs
