// Conversions between the SSH layer's types (remote/) and the run store's records (db/), shared by
// the Nodes page and the headless `flotilla nodes` commands.
//
// Decision: db/ and remote/ are sibling layers that never include each other, so the glue lives
// one layer up; this file is Qt-free so app/cli can use it without touching any widget code.
#pragma once

#include <cstdint>
#include <vector>

#include "db/nodes.h"
#include "remote/node_fields.h"
#include "remote/probe.h"

namespace flotilla::ui {

// A validated form (text as typed) as a store record: the key path made absolute.
db::SshNode nodeFromFields(const remote::NodeFields& fields);
// A stored node as form text: the price in fixed notation without trailing zeros (3.6, not 3.6000).
remote::NodeFields fieldsFromNode(const db::SshNode& node);
// One system sample per probed GPU of `nodeId`, all stamped `now` (unknown readings left empty).
std::vector<db::SystemSample> samplesFromGpus(int64_t nodeId, const std::vector<remote::GpuInfo>& gpus, double now);

}  // namespace flotilla::ui
