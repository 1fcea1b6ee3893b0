// The planner on measured links (see plan_links.h).
#include "runs/plan_links.h"

#include <algorithm>
#include <cstdio>
#include <ctime>

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

MeasuredLinkResult measured_link(const db::Database& db, const std::vector<std::string>& node_names,
                                 const LinkFigures& host) {
  MeasuredLinkResult r;
  if (node_names.size() < 2) return r;
  std::vector<int64_t> ids;
  std::string names;
  for (const auto& n : node_names) {
    names += (names.empty() ? "" : ",") + n;
    const auto node = db::find_node(db, n);
    if (!node) {
      r.note = "node " + n + " is not stored: no link figure for it";
      return r;
    }
    ids.push_back(node->id);
  }
  const auto rows = db::latest_links(db, ids);
  const db::NodeLink* slowest = nullptr;
  for (size_t i = 0; i < ids.size(); ++i)
    for (size_t j = 0; j < ids.size(); ++j) {
      if (i == j) continue;
      const db::NodeLink* found = nullptr;
      for (const auto& l : rows)
        if (l.from_node == ids[i] && l.to_node == ids[j] && l.bytes_per_s && *l.bytes_per_s > 0) found = &l;
      if (found == nullptr) {
        r.note =
            "no link measured " + node_names[i] + " -> " + node_names[j] + ": flotilla nodes links " + names;
        return r;
      }
      if (slowest == nullptr || *found->bytes_per_s < *slowest->bytes_per_s) {
        slowest = found;
        r.from = node_names[i];
        r.to = node_names[j];
      }
    }
  r.bytes_per_s = *slowest->bytes_per_s;
  r.latency_s = slowest->latency_s.value_or(0);
  r.measured_at = slowest->measured_at;
  LinkFigures f;
  f.bytes_per_s = host.bytes_per_s > 0 ? std::min(host.bytes_per_s, r.bytes_per_s) : r.bytes_per_s;
  f.latency_s = host.latency_s + 2.0 * static_cast<double>(node_names.size() - 1) * r.latency_s;
  f.source = "measured " + r.from + " -> " + r.to + " at " + utc_text(r.measured_at) + " (slowest of " +
             std::to_string(node_names.size()) + " nodes)";
  r.link = f;
  return r;
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
