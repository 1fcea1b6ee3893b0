// Conversions between the SSH layer's types (remote/) and the run store's records (db/), shared by
// the Nodes page and the headless `flotilla nodes` commands.
//
// Decision: db/ and remote/ are sibling layers that never include each other, so the glue lives
// one layer up; this file is Qt-free so app/cli can use it without touching any widget code.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "db/database.h"
#include "db/nodes.h"
#include "remote/latency.h"
#include "remote/node_fields.h"
#include "remote/probe.h"
#include "remote/session.h"

namespace flotilla::runs {

// A validated form (text as typed) as a store record: the key path made absolute.
db::SshNode node_from_fields(const remote::NodeFields& fields);
// A stored node as form text: the price in fixed notation without trailing zeros (3.6, not 3.6000).
remote::NodeFields fields_from_node(const db::SshNode& node);
// One system sample per probed GPU of `node_id`, all stamped `now` (unknown readings left empty).
std::vector<db::SystemSample> samples_from_gpus(int64_t node_id, const std::vector<remote::GpuInfo>& gpus,
                                                double now);

// A node taking part in a latency measurement.
struct LatencyNode {
  db::SshNode node;                    // as stored (its id keys the rows)
  remote::Session* session = nullptr;  // connected; nullptr: it could not be reached (see unavailable)
  std::string worker;                  // its deployed flotilla-worker (remote::DeployResult::worker)
  std::string unavailable;             // why it cannot measure ("" = it can); shown in its row
};

// Measures this machine -> every node and every node -> every other node (TCP connects to the
// sshd address the app uses, remote/latency.h), stores the links (db::upsert_node_latency; this
// machine is the store's "local" node) and returns them as stored. Blocking, for a worker thread;
// the sessions must not be used elsewhere meanwhile. Throws flotilla::Error(kUsage) for a bad
// address or worker path before anything runs, db::DbError when the store refuses.
std::vector<db::NodeLatency> measure_and_store_latency(db::Database& db,
                                                       const std::vector<LatencyNode>& nodes, int count = 5);

}  // namespace flotilla::runs
