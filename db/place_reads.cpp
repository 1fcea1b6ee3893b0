// Placement's reads (see place_reads.h).
#include "db/place_reads.h"

#include "db/sql.h"

namespace flotilla::db {

NodePowerState node_power_state(const Database& db, int64_t node_id) {
  NodePowerState s;
  Stmt st(db, "SELECT state, since FROM node_power WHERE node_id = ?1");
  st.bind(1, node_id);
  if (st.step()) {
    s.state = st.text(0);
    s.since = st.f64(1);
  }
  return s;
}

}  // namespace flotilla::db
