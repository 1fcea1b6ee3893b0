// The planner on measured links (issue 36): when a layout spans stored nodes, its communication term
// uses the slowest link measured among them (db::latest_links, from `flotilla nodes links` or a run's
// start) instead of this machine's loopback figures.
//
// Decisions:
// - The slowest measured inter-node link bounds every ring that crosses nodes, so it is the link:
//   bandwidth = min(that link's large-message bandwidth, this host's kept collective bandwidth: the
//   software's own ceiling stays), latency per collective = the host's kept per-collective time +
//   2 (n - 1) one-way latencies of that link (a ring all-reduce over n nodes has 2 (n - 1) steps).
// - A node pair that was never measured leaves the host's figures in place and says which command
//   measures it: a made-up link would mislead more than a loopback one that is named as such.
// - One node (or none) has no inter-node link: nothing changes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "db/database.h"
#include "engine/plan/calibration.h"

namespace flotilla::runs {

struct MeasuredLinkResult {
  std::optional<LinkFigures> link;        // the planner's figures; empty: keep the host's
  std::string from, to;                   // the slowest link's node names
  double measured_at = 0;                 // its measurement's unix time
  double bytes_per_s = 0, latency_s = 0;  // as measured (one-way latency)
  std::string note;  // "" when measured; else why not ("no link measured node-a -> node-b: flotilla nodes
                     // links node-a,node-b")
};

// A stored link by node names (the newest figure per ordered pair): what the wizard loads once.
struct NamedLink {
  std::string from, to;
  double bytes_per_s = 0, latency_s = 0, measured_at = 0;
};
std::vector<NamedLink> stored_links(const db::Database& db);
// The planner's link over `node_names` from links already read (measured_link reads them itself).
MeasuredLinkResult slowest_link_among(const std::vector<NamedLink>& links,
                                      const std::vector<std::string>& node_names, const LinkFigures& host);

// The planner's link over `node_names` (stored node names, launch order), given the host's figures.
MeasuredLinkResult measured_link(const db::Database& db, const std::vector<std::string>& node_names,
                                 const LinkFigures& host);

// measured_link applied to `calibration` (its link replaced when measured). Returns the line the
// surfaces print: "link: measured node-a -> node-b at 2026-12-07 12:00 UTC: 12.5 MB/s, 61 us one-way
// (planner: 12.5 MB/s, 1.9 ms per collective)", or the note; "" for fewer than two nodes.
std::string apply_measured_link(const db::Database& db, const std::vector<std::string>& node_names,
                                Calibration& calibration);

}  // namespace flotilla::runs
