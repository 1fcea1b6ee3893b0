// Slurm clusters, partition prices and Slurm jobs (see clusters.h).
#include "db/clusters.h"

#include "db/errors.h"
#include "db/sql.h"

namespace flotilla::db {
namespace {

constexpr const char* kSelect =
    "SELECT id, name, login_host, port, user, key_path, partition_name, account, probe_json, probed_at, "
    "created_at "
    "FROM clusters WHERE kind = 'slurm'";

SlurmCluster read_cluster(const Stmt& st) {
  SlurmCluster c;
  c.id = st.i64(0);
  c.name = st.text(1);
  c.login_host = st.text(2);
  c.port = static_cast<int>(st.i64(3));
  c.user = st.text(4);
  c.key_path = st.text(5);
  c.partition = st.text(6);
  c.account = st.text(7);
  c.probe_json = st.text(8);
  c.probed_at = st.opt_f64(9);
  c.created_at = st.f64(10);
  return c;
}

constexpr const char* kJobSelect =
    "SELECT run_id, cluster_id, job_id, partition_name, run_dir, state, reason, restarts, nodes, "
    "gpus_per_node, "
    "tasks_per_node, script, submitted_at, alloc_devices FROM slurm_jobs";

SlurmJob read_job(const Stmt& st) {
  SlurmJob j;
  j.run_id = st.i64(0);
  j.cluster_id = st.i64(1);
  j.job_id = st.text(2);
  j.partition = st.text(3);
  j.run_dir = st.text(4);
  j.state = st.text(5);
  j.reason = st.text(6);
  j.restarts = st.i64(7);
  j.nodes = st.i64(8);
  j.gpus_per_node = st.i64(9);
  j.tasks_per_node = st.i64(10);
  j.script = st.text(11);
  j.submitted_at = st.f64(12);
  j.alloc_devices = st.opt_i64(13);
  return j;
}

}  // namespace

int64_t add_cluster(Database& db, const SlurmCluster& c) {
  int64_t id = 0;
  write_tx(db, [&] {
    Stmt taken(db, "SELECT 1 FROM clusters WHERE name = ?1");
    taken.bind(1, c.name);
    if (taken.step())
      throw DbError(DbErrorKind::kConstraint,
                    "a cluster named '" + c.name + "' exists (flotilla clusters list)");
    Stmt st(db,
            "INSERT INTO clusters(name, provider, kind, login_host, port, user, key_path, partition_name, "
            "account, "
            "created_at) VALUES (?1, 'slurm', 'slurm', ?2, ?3, ?4, ?5, ?6, ?7, ?8)");
    st.bind(1, c.name).bind(2, c.login_host).bind(3, c.port).bind(4, c.user).bind(5, c.key_path);
    st.bind(6, c.partition).bind(7, c.account).bind(8, c.created_at > 0 ? c.created_at : now_seconds());
    st.run();
    id = last_insert_id(db);
  });
  return id;
}

std::optional<SlurmCluster> find_cluster(const Database& db, const std::string& name) {
  Stmt st(db, std::string(kSelect) + " AND name = ?1");
  st.bind(1, name);
  if (!st.step()) return std::nullopt;
  return read_cluster(st);
}

SlurmCluster get_cluster(const Database& db, const std::string& name) {
  if (auto c = find_cluster(db, name)) return *c;
  throw DbError(DbErrorKind::kNotFound,
                "no Slurm cluster named '" + name +
                    "': flotilla clusters list shows them, flotilla clusters add NAME "
                    "--login HOST adds one");
}

std::vector<SlurmCluster> list_clusters(const Database& db) {
  std::vector<SlurmCluster> out;
  Stmt st(db, std::string(kSelect) + " ORDER BY name");
  while (st.step()) out.push_back(read_cluster(st));
  return out;
}

void remove_cluster(Database& db, const std::string& name) {
  write_tx(db, [&] {
    const SlurmCluster c = get_cluster(db, name);
    Stmt used(db,
              "SELECT r.name FROM runs r JOIN slurm_jobs j ON j.run_id = r.id WHERE j.cluster_id = ?1 ORDER "
              "BY r.id "
              "LIMIT 3");
    used.bind(1, c.id);
    std::string runs;
    while (used.step()) runs += (runs.empty() ? "" : ", ") + used.text(0);
    if (!runs.empty())
      throw DbError(DbErrorKind::kConstraint, "cluster '" + name + "' is recorded in runs (" + runs +
                                                  "); delete those runs first (flotilla runs delete RUN)");
    Stmt del(db, "DELETE FROM clusters WHERE id = ?1");
    del.bind(1, c.id).run();
  });
}

void set_cluster_probe(Database& db, int64_t cluster_id, const std::string& probe_json, double at) {
  write_tx(db, [&] {
    Stmt st(db, "UPDATE clusters SET probe_json = ?2, probed_at = ?3 WHERE id = ?1");
    st.bind(1, cluster_id).bind(2, probe_json).bind(3, at).run();
  });
}

void set_partition_price(Database& db, int64_t cluster_id, const PartitionPrice& p) {
  if ((p.usd_per_gpu_hour && *p.usd_per_gpu_hour < 0) || (p.usd_per_cpu_hour && *p.usd_per_cpu_hour < 0))
    throw DbError(DbErrorKind::kInvalid, "partition " + p.partition + ": a price must not be negative");
  write_tx(db, [&] {
    Stmt st(db,
            "INSERT OR REPLACE INTO cluster_partitions(cluster_id, partition_name, usd_per_gpu_hour, "
            "usd_per_cpu_hour) VALUES (?1, ?2, ?3, ?4)");
    st.bind(1, cluster_id).bind(2, p.partition).bind(3, p.usd_per_gpu_hour).bind(4, p.usd_per_cpu_hour).run();
  });
}

std::vector<PartitionPrice> partition_prices(const Database& db, int64_t cluster_id) {
  std::vector<PartitionPrice> out;
  Stmt st(db,
          "SELECT partition_name, usd_per_gpu_hour, usd_per_cpu_hour FROM cluster_partitions WHERE "
          "cluster_id = ?1 "
          "ORDER BY partition_name");
  st.bind(1, cluster_id);
  while (st.step()) out.push_back(PartitionPrice{st.text(0), st.opt_f64(1), st.opt_f64(2)});
  return out;
}

std::optional<PartitionPrice> partition_price(const Database& db, int64_t cluster_id,
                                              const std::string& partition) {
  for (auto& p : partition_prices(db, cluster_id))
    if (p.partition == partition) return p;
  return std::nullopt;
}

void add_slurm_job(Database& db, const SlurmJob& j) {
  write_tx(db, [&] {
    Stmt st(db,
            "INSERT INTO slurm_jobs(run_id, cluster_id, job_id, partition_name, run_dir, state, reason, "
            "restarts, "
            "nodes, gpus_per_node, tasks_per_node, script, submitted_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, "
            "?8, ?9, "
            "?10, ?11, ?12, ?13)");
    st.bind(1, j.run_id).bind(2, j.cluster_id).bind(3, j.job_id).bind(4, j.partition).bind(5, j.run_dir);
    st.bind(6, j.state).bind(7, j.reason).bind(8, j.restarts).bind(9, j.nodes).bind(10, j.gpus_per_node);
    st.bind(11, j.tasks_per_node)
        .bind(12, j.script)
        .bind(13, j.submitted_at > 0 ? j.submitted_at : now_seconds());
    st.run();
  });
}

std::optional<SlurmJob> find_slurm_job(const Database& db, int64_t run_id) {
  Stmt st(db, std::string(kJobSelect) + " WHERE run_id = ?1");
  st.bind(1, run_id);
  if (!st.step()) return std::nullopt;
  return read_job(st);
}

std::vector<SlurmJob> cluster_jobs(const Database& db, int64_t cluster_id) {
  std::vector<SlurmJob> out;
  Stmt st(db, std::string(kJobSelect) + " WHERE cluster_id = ?1 ORDER BY submitted_at DESC, run_id DESC");
  st.bind(1, cluster_id);
  while (st.step()) out.push_back(read_job(st));
  return out;
}

void set_slurm_job_state(Database& db, int64_t run_id, const std::string& state, const std::string& reason,
                         int64_t restarts) {
  write_tx(db, [&] {
    Stmt st(db,
            "UPDATE slurm_jobs SET state = ?2, reason = ?3, restarts = ?4 WHERE run_id = ?1 AND (state IS "
            "NOT ?2 OR "
            "reason IS NOT ?3 OR restarts IS NOT ?4)");
    st.bind(1, run_id).bind(2, state).bind(3, reason).bind(4, restarts).run();
  });
}

void set_slurm_job_devices(Database& db, int64_t run_id, int64_t devices) {
  if (devices < 0) throw DbError(DbErrorKind::kInvalid, "a job's allocated devices cannot be negative");
  write_tx(db, [&] {
    Stmt st(db, "UPDATE slurm_jobs SET alloc_devices = ?2 WHERE run_id = ?1");
    st.bind(1, run_id).bind(2, devices).run();
  });
}

void resubmit_slurm_job(Database& db, int64_t run_id, const std::string& job_id, double at) {
  write_tx(db, [&] {
    Stmt st(db,
            "UPDATE slurm_jobs SET job_id = ?2, state = 'PENDING', reason = '', restarts = 0, submitted_at = ?3, "
            "alloc_devices = NULL WHERE run_id = ?1");
    st.bind(1, run_id).bind(2, job_id).bind(3, at).run();
    if (changes_count(db) != 1)
      throw DbError(DbErrorKind::kNotFound, "run " + std::to_string(run_id) + " has no Slurm job to resubmit");
  });
}

void insert_job_samples(Database& db, const std::vector<JobGpuSample>& samples) {
  if (samples.empty()) return;
  write_tx(db, [&] {
    Stmt st(db,
            "INSERT OR REPLACE INTO slurm_job_samples(run_id, node, device, time, utilization, memory_used, "
            "memory_total, power_w, temperature_c) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
    for (const JobGpuSample& s : samples) {
      st.bind(1, s.run_id).bind(2, s.node).bind(3, s.device).bind(4, s.time).bind(5, s.utilization);
      st.bind(6, s.memory_used).bind(7, s.memory_total).bind(8, s.power_w).bind(9, s.temperature_c).run();
      st.reset();
    }
  });
}

std::vector<JobGpuSample> job_samples(const Database& db, int64_t run_id, double since) {
  std::vector<JobGpuSample> out;
  Stmt st(db,
          "SELECT run_id, node, device, time, utilization, memory_used, memory_total, power_w, temperature_c "
          "FROM slurm_job_samples WHERE run_id = ?1 AND time >= ?2 ORDER BY time, node, device");
  st.bind(1, run_id).bind(2, since);
  while (st.step()) {
    JobGpuSample s;
    s.run_id = st.i64(0);
    s.node = st.text(1);
    s.device = static_cast<int>(st.i64(2));
    s.time = st.f64(3);
    s.utilization = st.opt_f64(4);
    s.memory_used = st.opt_i64(5);
    s.memory_total = st.opt_i64(6);
    s.power_w = st.opt_f64(7);
    s.temperature_c = st.opt_f64(8);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace flotilla::db
