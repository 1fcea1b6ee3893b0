// What placement (runs/queue_place.h) reads of the store beyond the other db/ modules: a node's
// power state as autostop keeps it (node_power, schema v11).
//
// Decision: read-only and tolerant: a node without a node_power row is on (autostop never touched
// it), so placement needs no row per node.
#pragma once

#include <cstdint>
#include <string>

#include "db/database.h"

namespace flotilla::db {

struct NodePowerState {
  std::string state = "on";  // on, stopping, stopped, starting
  double since = 0;          // when it entered that state (0: never recorded)
};
// The node's power state; "on" when it has no node_power row.
NodePowerState node_power_state(const Database& db, int64_t node_id);

}  // namespace flotilla::db
