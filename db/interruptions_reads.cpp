// Interruptions on a place, read from accruals and status events (interruptions_reads.h).
#include "db/interruptions_reads.h"

#include "db/sql.h"

namespace flotilla::db {
namespace {

// An accrual row of `table` ended by a preemption: its run has a status event "running ->
// preempted" at the accrual's end (set_status closes the accrual and writes the event at one time).
constexpr const char* kPreemptedAt =
    "EXISTS (SELECT 1 FROM events e WHERE e.run_id = a.run_id AND e.kind = 'status' AND "
    "e.message LIKE 'running -> preempted%' AND abs(e.time - a.end_time) < 0.001)";

}  // namespace

PlaceExposure node_exposure(const Database& db, const std::string& node_name, double now) {
  PlaceExposure out;
  Stmt node(db,
            "SELECT n.id, COALESCE(p.spot, 0) FROM nodes n LEFT JOIN node_pricing p ON p.node_id = n.id "
            "WHERE n.name = ?1");
  node.bind(1, node_name);
  if (!node.step()) return out;
  out.known = true;
  const int64_t id = node.i64(0);
  out.spot = node.i64(1) != 0;
  Stmt sums(db, std::string("SELECT COALESCE(sum(max(0, COALESCE(a.end_time, ?2) - a.start_time)), 0), "
                            "COALESCE(sum(CASE WHEN a.end_time IS NOT NULL AND ") +
                    kPreemptedAt + " THEN 1 ELSE 0 END), 0) FROM cost_accruals a WHERE a.node_id = ?1");
  sums.bind(1, id).bind(2, now);
  if (sums.step()) {
    out.running_s = sums.f64(0);
    out.preemptions = sums.i64(1);
  }
  return out;
}

PlaceExposure cluster_exposure(const Database& db, const std::string& cluster_name,
                               const std::string& partition, double now) {
  PlaceExposure out;
  Stmt cluster(db, "SELECT id FROM clusters WHERE name = ?1");
  cluster.bind(1, cluster_name);
  if (!cluster.step()) return out;
  out.known = true;
  const int64_t id = cluster.i64(0);
  Stmt sums(db,
            std::string("SELECT COALESCE(sum(max(0, COALESCE(a.end_time, ?2) - a.start_time)), 0), "
                        "COALESCE(sum(CASE WHEN a.end_time IS NOT NULL AND ") +
                kPreemptedAt +
                " THEN 1 ELSE 0 END), 0) FROM cluster_accruals a JOIN slurm_jobs j ON j.run_id = a.run_id "
                "WHERE a.cluster_id = ?1 AND (?3 = '' OR j.partition_name = ?3)");
  sums.bind(1, id).bind(2, now).bind(3, partition);
  if (sums.step()) {
    out.running_s = sums.f64(0);
    out.preemptions = sums.i64(1);
  }
  return out;
}

}  // namespace flotilla::db
