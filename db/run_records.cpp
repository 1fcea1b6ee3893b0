// Checkpoints, events and system samples (see run_records.h).
#include "db/run_records.h"

#include <algorithm>

#include "db/sql.h"

namespace flotilla::db {

std::vector<CheckpointInfo> list_checkpoints(const Database& db, int64_t run_id) {
  std::vector<CheckpointInfo> out;
  Stmt st(db,
          "SELECT step, dir, reason, bytes, seconds, time FROM checkpoints WHERE run_id = ?1 ORDER BY step");
  st.bind(1, run_id);
  while (st.step()) out.push_back({st.i64(0), st.text(1), st.text(2), st.i64(3), st.f64(4), st.f64(5)});
  return out;
}

std::vector<EventInfo> list_events(const Database& db, int64_t run_id, int limit) {
  std::vector<EventInfo> out;
  Stmt st(db,
          "SELECT time, kind, level, message, fields, rank FROM events WHERE run_id = ?1 "
          "ORDER BY time DESC, id DESC LIMIT ?2");
  st.bind(1, run_id).bind(2, limit > 0 ? int64_t{limit} : int64_t{-1});
  while (st.step())
    out.push_back({st.f64(0), st.text(1), st.text(2), st.text(3), st.text(4), static_cast<int>(st.i64(5))});
  std::reverse(out.begin(), out.end());
  return out;
}

void add_system_samples(Database& db, const std::vector<SystemSample>& samples) {
  write_tx(db, [&] {
    Stmt st(db,
            "INSERT OR REPLACE INTO system_samples(node_id, device, time, utilization, memory_used, "
            "memory_total, "
            "power_w, temperature_c) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
    for (const SystemSample& s : samples) {
      st.bind(1, s.node_id).bind(2, s.device).bind(3, s.time).bind(4, s.utilization).bind(5, s.memory_used);
      st.bind(6, s.memory_total).bind(7, s.power_w).bind(8, s.temperature_c).run();
      st.reset();
    }
  });
}

std::vector<SystemSample> system_samples(const Database& db, int64_t node_id, double from, double to) {
  std::vector<SystemSample> out;
  Stmt st(db,
          "SELECT node_id, device, time, utilization, power_w, temperature_c, memory_used, memory_total "
          "FROM system_samples WHERE node_id = ?1 AND time BETWEEN ?2 AND ?3 ORDER BY time, device");
  st.bind(1, node_id).bind(2, from).bind(3, to);
  while (st.step())
    out.push_back({st.i64(0), static_cast<int>(st.i64(1)), st.f64(2), st.opt_f64(3), st.opt_f64(4),
                   st.opt_f64(5), st.opt_i64(6), st.opt_i64(7)});
  return out;
}

}  // namespace flotilla::db
