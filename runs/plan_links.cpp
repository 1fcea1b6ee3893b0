// The planner on measured links (see plan_links.h).
#include "runs/plan_links.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <map>

#include "db/links.h"
#include "db/run_store.h"
#include "runs/comm_efficiency.h"

namespace flotilla::runs {
namespace {

std::string utc_text(double t) {
  const std::time_t s = static_cast<std::time_t>(t);
  std::tm tm{};
  gmtime_r(&s, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

std::string seconds_short(double s) {
  char buf[32];
  if (s >= 1e-3)
    std::snprintf(buf, sizeof buf, "%.1f ms", s * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f us", s * 1e6);
  return buf;
}

}  // namespace

std::vector<NamedLink> stored_links(const db::Database& db) {
  std::map<int64_t, std::string> names;
  for (const auto& n : db::list_nodes(db)) names[n.id] = n.name;
  std::vector<NamedLink> out;
  for (const auto& l : db::latest_links(db)) {
    if (!l.bytes_per_s || *l.bytes_per_s <= 0 || !names.count(l.from_node) || !names.count(l.to_node))
      continue;
    out.push_back(
        {names[l.from_node], names[l.to_node], *l.bytes_per_s, l.latency_s.value_or(0), l.measured_at});
  }
  return out;
}

MeasuredLinkResult slowest_link_among(const std::vector<NamedLink>& links,
                                      const std::vector<std::string>& node_names, const LinkFigures& host) {
  MeasuredLinkResult r;
  if (node_names.size() < 2) return r;
  std::string names;
  for (const auto& n : node_names) names += (names.empty() ? "" : ",") + n;
  const NamedLink* slowest = nullptr;
  for (const auto& from : node_names)
    for (const auto& to : node_names) {
      if (from == to) continue;
      const NamedLink* found = nullptr;
      for (const auto& l : links)
        if (l.from == from && l.to == to) found = &l;
      if (found == nullptr) {
        r.note = "no link measured " + from + " -> " + to + ": flotilla nodes links " + names;
        return r;
      }
      if (slowest == nullptr || found->bytes_per_s < slowest->bytes_per_s) slowest = found;
    }
  r.from = slowest->from;
  r.to = slowest->to;
  r.bytes_per_s = slowest->bytes_per_s;
  r.latency_s = slowest->latency_s;
  r.measured_at = slowest->measured_at;
  LinkFigures f;
  f.bytes_per_s = host.bytes_per_s > 0 ? std::min(host.bytes_per_s, r.bytes_per_s) : r.bytes_per_s;
  f.latency_s = host.latency_s + 2.0 * static_cast<double>(node_names.size() - 1) * r.latency_s;
  f.source = "measured " + r.from + " -> " + r.to + " at " + utc_text(r.measured_at) + " (slowest of " +
             std::to_string(node_names.size()) + " nodes)";
  r.link = f;
  return r;
}

MeasuredLinkResult measured_link(const db::Database& db, const std::vector<std::string>& node_names,
                                 const LinkFigures& host) {
  MeasuredLinkResult r;
  if (node_names.size() < 2) return r;
  for (const auto& n : node_names)
    if (!db::find_node(db, n)) {
      r.note = "node " + n + " is not stored: no link figure for it";
      return r;
    }
  return slowest_link_among(stored_links(db), node_names, host);
}

std::string apply_measured_link(const db::Database& db, const std::vector<std::string>& node_names,
                                Calibration& calibration) {
  if (node_names.size() < 2) return "";
  const MeasuredLinkResult m = measured_link(db, node_names, calibration.link);
  if (!m.link)
    return "link: " + m.note + "; planned with " +
           (calibration.link.source.empty() ? std::string("the device profile's link")
                                            : calibration.link.source);
  calibration.link = *m.link;
  return "link: " + m.link->source + ": " + rate_text(m.bytes_per_s) + ", " + seconds_short(m.latency_s) +
         " one-way (planner: " + rate_text(m.link->bytes_per_s) + ", " + seconds_short(m.link->latency_s) +
         " per collective)";
}

}  // namespace flotilla::runs
