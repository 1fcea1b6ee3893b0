// Link matrices measured on the collective path (issue 36, schema v12): how fast the transport a
// run uses (Gloo's TCP, NCCL) carries data between two nodes, and between two ranks on one node.
//
// Decision: a measurement is kept whole (which nodes took part, when, over what, for which run, what
// went wrong) rather than one latest figure per pair, because a run's communication efficiency is
// judged against the links measured when IT started (run_link_measurement), while the Nodes page
// and the planner want the newest figure per pair (latest_links). The TCP-connect matrix of
// nodes.h (node_latency) is the reachability check and stays separate.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "db/database.h"

namespace flotilla::db {

struct NodeLink {
  int64_t from_node = 0;
  int64_t to_node = 0;                 // == from_node: the node's intra-node figure (two ranks on it)
  std::optional<double> latency_s;     // one-way small-message latency (half the ping-pong round trip)
  std::optional<double> bytes_per_s;   // large-message bandwidth from -> to
  std::string error;                   // "" when measured; else why not ("node b: rank 1 did not join in 20 s")
  double measured_at = 0;              // filled on read (the measurement's time)
  int64_t measurement_id = 0;          // filled on read
};

struct LinkMeasurement {
  int64_t id = 0;                      // 0 until stored
  double measured_at = 0;              // unix seconds; 0 = now when stored
  std::string transport;               // "gloo/tcp" | "nccl"
  std::optional<int64_t> run_id;       // the run it was measured for (at its start); empty: by hand
  double seconds = 0;                  // how long the measurement took
  std::string note;                    // problems met, one sentence per line ("" none)
  std::vector<NodeLink> links;
};

// Stores a measurement and its links in one transaction; returns its id. DbError(kInvalid) when a
// link has neither both figures nor an error, a figure is negative (or a bandwidth not > 0), the
// transport is empty, or an ordered pair appears twice.
int64_t store_link_measurement(Database& db, const LinkMeasurement& m);
std::optional<LinkMeasurement> link_measurement(const Database& db, int64_t id);
// The newest measurement stored for `run_id`, if any.
std::optional<LinkMeasurement> run_link_measurement(const Database& db, int64_t run_id);
// The newest measurement of any kind, if any (the Nodes page shows it at start).
std::optional<LinkMeasurement> latest_link_measurement(const Database& db);
// For every ordered pair among `node_ids` (intra-node pairs included), the newest stored link row
// that has figures, else the newest with an error; ordered by from, to. Empty `node_ids`: all nodes.
std::vector<NodeLink> latest_links(const Database& db, const std::vector<int64_t>& node_ids = {});

}  // namespace flotilla::db
