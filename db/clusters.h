// Slurm clusters in the store: how to reach the login node, the defaults for submissions, what the
// last probe saw, a price per partition, and the Slurm job behind each Slurm run.
//
// Decision: a cluster is a row of the `clusters` table (kind 'slurm'), never a row of `nodes`: its
// compute nodes belong to Slurm and come and go, so runs on it are tied to the cluster and its
// job (slurm_jobs), not to node rows. As for SSH nodes (nodes.h), only what is needed to connect
// is kept (a key file's path, never a secret), and field validation is the caller's
// (remote/validate.h, remote/slurm_script.h): db/ does not depend on remote/.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "db/database.h"

namespace flotilla::db {

struct SlurmCluster {
  int64_t id = 0;
  std::string name;
  std::string login_host;
  int port = 22;
  std::string user;        // "": the local user (or ~/.ssh/config)
  std::string key_path;    // "": ssh-agent, then the default key files
  std::string partition;   // default partition for runs ("": the cluster's own default)
  std::string account;     // default account ("": the user's default)
  std::string probe_json;  // the last probe, as remote/slurm_cluster.h's ClusterProbe in JSON ("": never)
  std::optional<double> probed_at;
  double created_at = 0;
};

// Inserts a cluster. DbError(kConstraint) when the name is taken.
int64_t add_cluster(Database& db, const SlurmCluster& cluster);
std::optional<SlurmCluster> find_cluster(const Database& db, const std::string& name);
// find_cluster or DbError(kNotFound) suggesting `flotilla clusters list`.
SlurmCluster get_cluster(const Database& db, const std::string& name);
std::vector<SlurmCluster> list_clusters(const Database& db);
// Deletes the cluster and its prices; DbError(kConstraint) naming the runs when runs used it.
void remove_cluster(Database& db, const std::string& name);
void set_cluster_probe(Database& db, int64_t cluster_id, const std::string& probe_json, double at);

// What an hour of a partition costs: per allocated GPU, and per allocated CPU (for CPU partitions).
struct PartitionPrice {
  std::string partition;
  std::optional<double> usd_per_gpu_hour;
  std::optional<double> usd_per_cpu_hour;
};
// Sets (inserts or replaces) a partition's price. DbError(kInvalid) for a negative price.
void set_partition_price(Database& db, int64_t cluster_id, const PartitionPrice& price);
std::vector<PartitionPrice> partition_prices(const Database& db, int64_t cluster_id);
std::optional<PartitionPrice> partition_price(const Database& db, int64_t cluster_id,
                                              const std::string& partition);

// The Slurm job of a Slurm run (one per run; it keeps its id across requeues).
struct SlurmJob {
  int64_t run_id = 0;
  int64_t cluster_id = 0;
  std::string job_id;
  std::string partition;  // as submitted ("": the cluster's default)
  std::string run_dir;    // absolute, on the cluster's shared file system
  std::string state;      // the latest Slurm state seen (PENDING, RUNNING, COMPLETED, ...)
  std::string reason;     // the latest pending reason ("" when none)
  int64_t restarts = 0;   // SLURM_RESTART_COUNT last seen
  int64_t nodes = 0, gpus_per_node = 0, tasks_per_node = 0;
  std::string script;  // the batch script as submitted
  double submitted_at = 0;
  std::optional<int64_t> alloc_devices;  // what Slurm allocated (GPUs, or CPUs of a CPU job), once known
};
// Inserts the job row of a run. DbError(kConstraint) when the run already has one.
void add_slurm_job(Database& db, const SlurmJob& job);
std::optional<SlurmJob> find_slurm_job(const Database& db, int64_t run_id);
// Jobs of the cluster's runs, newest first.
std::vector<SlurmJob> cluster_jobs(const Database& db, int64_t cluster_id);
// Records the state, reason and restart count last seen (only the changed row is written).
void set_slurm_job_state(Database& db, int64_t run_id, const std::string& state, const std::string& reason,
                         int64_t restarts);

// The devices Slurm allocated to the run's job (GPUs of a GPU job, CPUs of a CPU job), read from
// its TRES when it starts; the cost accruals opened from then on count them.
void set_slurm_job_devices(Database& db, int64_t run_id, int64_t devices);

// The run submitted again as job `job_id` (`flotilla runs resume`): PENDING, no reason, no restarts
// (SLURM_RESTART_COUNT starts over with a new job), submitted at `at`.
void resubmit_slurm_job(Database& db, int64_t run_id, const std::string& job_id, double at);

// One GPU's reading inside a Slurm job's allocation (slurm_job_samples). `node` is Slurm's node
// name (SLURMD_NODENAME), `device` the index nvidia-smi gives inside the job step.
struct JobGpuSample {
  int64_t run_id = 0;
  std::string node;
  int device = 0;
  double time = 0;
  std::optional<double> utilization;                 // percent
  std::optional<int64_t> memory_used, memory_total;  // bytes
  std::optional<double> power_w, temperature_c;
};
// Inserts in one transaction; a repeated (run, node, device, time) replaces the old reading.
void insert_job_samples(Database& db, const std::vector<JobGpuSample>& samples);
// The run's readings with time >= since, oldest first (every node and device).
std::vector<JobGpuSample> job_samples(const Database& db, int64_t run_id, double since = 0);

}  // namespace flotilla::db
