// The workspace schema as ordered migration steps (database.h explains how they are applied;
// docs/store.md documents every table).
//
// Decision: a step is never edited once released, because old workspaces replay exactly the steps
// they lack; tests/db/golden/ holds a database at every earlier version and test_migrations opens
// each one. Metric rows are keyed (run_id, name, step) WITHOUT ROWID so a step re-ingested after a
// resume replaces its value; metric_blocks keeps min/max/last per 256-step block beside them so a
// plot of millions of points reads thousands of block rows (downsample.cpp).
#include <string>

#include "db/database.h"
#include "flotilla/build_info.h"

namespace flotilla::db {
namespace {

// v2: runs and what a run produces (metrics, checkpoints, events, ingest offsets).
constexpr const char* kV2 = R"sql(
CREATE TABLE runs (
  id           INTEGER PRIMARY KEY,
  name         TEXT NOT NULL UNIQUE,
  status       TEXT NOT NULL DEFAULT 'created' CHECK (status IN
                 ('created','queued','running','paused','preempted','stopped','failed','completed')),
  config_toml  TEXT NOT NULL DEFAULT '',
  config_json  TEXT NOT NULL DEFAULT '{}',
  target       TEXT NOT NULL DEFAULT 'local',
  run_dir      TEXT NOT NULL DEFAULT '',
  parent_id    INTEGER REFERENCES runs(id) ON DELETE SET NULL,
  parent_kind  TEXT CHECK (parent_kind IN ('resume','fork')),
  notes        TEXT NOT NULL DEFAULT '',
  created_at   REAL NOT NULL,
  started_at   REAL,
  ended_at     REAL,
  exit_code    INTEGER,
  world_size   INTEGER,
  parameters   INTEGER,
  flops_per_token REAL,
  summary_json TEXT
);
CREATE INDEX runs_by_status ON runs(status, created_at);
CREATE INDEX runs_by_created ON runs(created_at);

CREATE TABLE run_tags (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  tag    TEXT NOT NULL,
  PRIMARY KEY (run_id, tag)
) WITHOUT ROWID;
CREATE INDEX run_tags_by_tag ON run_tags(tag);

CREATE TABLE metrics (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  name   TEXT NOT NULL,
  step   INTEGER NOT NULL,
  value  REAL NOT NULL,
  time   REAL NOT NULL,
  PRIMARY KEY (run_id, name, step)
) WITHOUT ROWID;

CREATE TABLE metric_blocks (
  run_id     INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  name       TEXT NOT NULL,
  block      INTEGER NOT NULL,
  count      INTEGER NOT NULL,
  min_value  REAL NOT NULL,
  max_value  REAL NOT NULL,
  first_step INTEGER NOT NULL,
  last_step  INTEGER NOT NULL,
  last_value REAL NOT NULL,
  last_time  REAL NOT NULL,
  PRIMARY KEY (run_id, name, block)
) WITHOUT ROWID;

CREATE TABLE checkpoints (
  run_id  INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  step    INTEGER NOT NULL,
  dir     TEXT NOT NULL,
  bytes   INTEGER NOT NULL DEFAULT 0,
  seconds REAL NOT NULL DEFAULT 0,
  reason  TEXT NOT NULL DEFAULT '',
  time    REAL NOT NULL,
  PRIMARY KEY (run_id, step)
) WITHOUT ROWID;

CREATE TABLE events (
  id      INTEGER PRIMARY KEY,
  run_id  INTEGER REFERENCES runs(id) ON DELETE CASCADE,
  time    REAL NOT NULL,
  kind    TEXT NOT NULL,
  level   TEXT NOT NULL DEFAULT 'info' CHECK (level IN ('info','warning','error')),
  rank    INTEGER NOT NULL DEFAULT 0,
  message TEXT NOT NULL,
  fields  TEXT NOT NULL DEFAULT '{}',
  UNIQUE (run_id, time, kind, rank, message)
);
CREATE INDEX events_by_run ON events(run_id, time);

CREATE TABLE ingest_offsets (
  run_id     INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  source     TEXT NOT NULL,
  byte_offset INTEGER NOT NULL,
  updated_at REAL NOT NULL,
  PRIMARY KEY (run_id, source)
) WITHOUT ROWID;
)sql";

// v3: where runs execute, and what their devices report.
constexpr const char* kV3 = R"sql(
CREATE TABLE clusters (
  id       INTEGER PRIMARY KEY,
  name     TEXT NOT NULL UNIQUE,
  provider TEXT NOT NULL DEFAULT '',
  notes    TEXT NOT NULL DEFAULT ''
);
CREATE TABLE nodes (
  id         INTEGER PRIMARY KEY,
  name       TEXT NOT NULL UNIQUE,
  cluster_id INTEGER REFERENCES clusters(id) ON DELETE SET NULL,
  kind       TEXT NOT NULL DEFAULT 'local' CHECK (kind IN ('local','ssh')),
  host       TEXT NOT NULL DEFAULT '',
  gpu_type   TEXT NOT NULL DEFAULT '',
  gpu_count  INTEGER NOT NULL DEFAULT 0,
  created_at REAL NOT NULL
);
CREATE TABLE system_samples (
  node_id      INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
  device       INTEGER NOT NULL,
  time         REAL NOT NULL,
  utilization  REAL,
  memory_used  INTEGER,
  memory_total INTEGER,
  power_w      REAL,
  temperature_c REAL,
  PRIMARY KEY (node_id, device, time)
) WITHOUT ROWID;
CREATE TABLE run_nodes (
  run_id  INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  node_id INTEGER NOT NULL REFERENCES nodes(id) ON DELETE RESTRICT,
  devices INTEGER NOT NULL DEFAULT 1,
  PRIMARY KEY (run_id, node_id)
) WITHOUT ROWID;
)sql";

// v4: prices, what nodes cost, accruals per run and node, run budgets.
constexpr const char* kV4 = R"sql(
CREATE TABLE pricing (
  id          INTEGER PRIMARY KEY,
  provider    TEXT NOT NULL,
  item        TEXT NOT NULL,
  gpu_type    TEXT NOT NULL DEFAULT '',
  gpus        INTEGER NOT NULL DEFAULT 1,
  on_demand_usd_per_hour REAL NOT NULL CHECK (on_demand_usd_per_hour >= 0),
  spot_usd_per_hour      REAL CHECK (spot_usd_per_hour >= 0),
  as_of       TEXT NOT NULL DEFAULT '',
  source      TEXT NOT NULL DEFAULT '',
  user_edited INTEGER NOT NULL DEFAULT 0,
  UNIQUE (provider, item)
);
CREATE TABLE node_pricing (
  node_id       INTEGER PRIMARY KEY REFERENCES nodes(id) ON DELETE CASCADE,
  pricing_id    INTEGER REFERENCES pricing(id) ON DELETE SET NULL,
  spot          INTEGER NOT NULL DEFAULT 0,
  usd_per_hour  REAL CHECK (usd_per_hour >= 0),
  power_w       REAL CHECK (power_w >= 0),
  tariff_usd_per_kwh REAL CHECK (tariff_usd_per_kwh >= 0)
);
CREATE TABLE cost_accruals (
  id           INTEGER PRIMARY KEY,
  run_id       INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  node_id      INTEGER NOT NULL REFERENCES nodes(id) ON DELETE RESTRICT,
  status       TEXT NOT NULL,
  start_time   REAL NOT NULL,
  end_time     REAL,
  devices      INTEGER NOT NULL,
  usd_per_hour REAL NOT NULL,
  rate_source  TEXT NOT NULL DEFAULT ''
);
CREATE INDEX cost_accruals_by_run ON cost_accruals(run_id, start_time);
CREATE INDEX cost_accruals_by_node ON cost_accruals(node_id, start_time);
ALTER TABLE runs ADD COLUMN budget_usd REAL;
ALTER TABLE runs ADD COLUMN budget_warn_fraction REAL NOT NULL DEFAULT 0.8;
)sql";

// v5: how to reach an SSH node (port, user, key file: a path, never a secret) and its labels.
constexpr const char* kV5 = R"sql(
ALTER TABLE nodes ADD COLUMN port INTEGER NOT NULL DEFAULT 22 CHECK (port BETWEEN 1 AND 65535);
ALTER TABLE nodes ADD COLUMN user TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN key_path TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN labels TEXT NOT NULL DEFAULT '';
)sql";

// v6: the latency matrix: the latest TCP connect round trip (median ms) or the error, per ordered
// pair of nodes; "this machine" is the store's local node.
constexpr const char* kV6 = R"sql(
CREATE TABLE node_latency (
  from_node   INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
  to_node     INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
  rtt_ms      REAL CHECK (rtt_ms >= 0),
  error       TEXT,
  measured_at REAL NOT NULL,
  PRIMARY KEY (from_node, to_node),
  CHECK (rtt_ms IS NOT NULL OR error IS NOT NULL)
) WITHOUT ROWID;
CREATE INDEX node_latency_by_to ON node_latency(to_node);
)sql";

// v7: one price per run, resolved when it starts (issue 16): the run's total $/hour and where it
// came from, each attached node's share of it (the accruals' rate), the wall-time cap, and a
// short note on the latest status (why it stopped: "budget reached: $0.0201 of $0.02").
constexpr const char* kV7 = R"sql(
ALTER TABLE runs ADD COLUMN usd_per_hour REAL CHECK (usd_per_hour >= 0);
ALTER TABLE runs ADD COLUMN price_source TEXT NOT NULL DEFAULT '';
ALTER TABLE runs ADD COLUMN max_hours REAL CHECK (max_hours > 0);
ALTER TABLE runs ADD COLUMN status_note TEXT NOT NULL DEFAULT '';
ALTER TABLE run_nodes ADD COLUMN usd_per_hour REAL CHECK (usd_per_hour >= 0);
ALTER TABLE run_nodes ADD COLUMN rate_source TEXT NOT NULL DEFAULT '';
)sql";

// v8: Slurm clusters (issue 20): a cluster row of kind 'slurm' says how to reach its login node,
// the submission defaults and what the last probe saw; a price per partition (per allocated GPU
// and per allocated CPU hour); the Slurm job behind each Slurm run (it keeps its id when requeued);
// cost accruals of Slurm runs, as cost_accruals but charged to the cluster (its nodes are Slurm's).
constexpr const char* kV8 = R"sql(
ALTER TABLE clusters ADD COLUMN kind TEXT NOT NULL DEFAULT '';
ALTER TABLE clusters ADD COLUMN login_host TEXT NOT NULL DEFAULT '';
ALTER TABLE clusters ADD COLUMN port INTEGER NOT NULL DEFAULT 22 CHECK (port BETWEEN 1 AND 65535);
ALTER TABLE clusters ADD COLUMN user TEXT NOT NULL DEFAULT '';
ALTER TABLE clusters ADD COLUMN key_path TEXT NOT NULL DEFAULT '';
ALTER TABLE clusters ADD COLUMN partition_name TEXT NOT NULL DEFAULT '';
ALTER TABLE clusters ADD COLUMN account TEXT NOT NULL DEFAULT '';
ALTER TABLE clusters ADD COLUMN probe_json TEXT NOT NULL DEFAULT '';
ALTER TABLE clusters ADD COLUMN probed_at REAL;
ALTER TABLE clusters ADD COLUMN created_at REAL NOT NULL DEFAULT 0;
CREATE TABLE cluster_partitions (
  cluster_id       INTEGER NOT NULL REFERENCES clusters(id) ON DELETE CASCADE,
  partition_name   TEXT NOT NULL,
  usd_per_gpu_hour REAL CHECK (usd_per_gpu_hour >= 0),
  usd_per_cpu_hour REAL CHECK (usd_per_cpu_hour >= 0),
  PRIMARY KEY (cluster_id, partition_name)
) WITHOUT ROWID;
CREATE TABLE slurm_jobs (
  run_id         INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
  cluster_id     INTEGER NOT NULL REFERENCES clusters(id) ON DELETE RESTRICT,
  job_id         TEXT NOT NULL,
  partition_name TEXT NOT NULL DEFAULT '',
  run_dir        TEXT NOT NULL,
  state          TEXT NOT NULL DEFAULT '',
  reason         TEXT NOT NULL DEFAULT '',
  restarts       INTEGER NOT NULL DEFAULT 0,
  nodes          INTEGER NOT NULL DEFAULT 1,
  gpus_per_node  INTEGER NOT NULL DEFAULT 0,
  tasks_per_node INTEGER NOT NULL DEFAULT 1,
  script         TEXT NOT NULL DEFAULT '',
  submitted_at   REAL NOT NULL
);
CREATE INDEX slurm_jobs_by_cluster ON slurm_jobs(cluster_id, job_id);
CREATE TABLE cluster_accruals (
  id           INTEGER PRIMARY KEY,
  run_id       INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  cluster_id   INTEGER NOT NULL REFERENCES clusters(id) ON DELETE RESTRICT,
  status       TEXT NOT NULL,
  start_time   REAL NOT NULL,
  end_time     REAL,
  devices      INTEGER NOT NULL,
  usd_per_hour REAL NOT NULL,
  rate_source  TEXT NOT NULL DEFAULT ''
);
CREATE INDEX cluster_accruals_by_run ON cluster_accruals(run_id, start_time);
)sql";

// v9: GPU readings inside a Slurm job's allocation (issue 20), read by `srun --overlap` into the job:
// keyed by the run and Slurm's node name, since a cluster's compute nodes are Slurm's, not rows of
// `nodes` (those are SSH and local machines). And the devices Slurm allocated to a job (GPUs of a
// GPU job, CPUs of a CPU job, from its TRES once it starts): its device-hours count them.
constexpr const char* kV9 = R"sql(
ALTER TABLE slurm_jobs ADD COLUMN alloc_devices INTEGER CHECK (alloc_devices >= 0);
CREATE TABLE slurm_job_samples (
  run_id        INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  node          TEXT NOT NULL,
  device        INTEGER NOT NULL,
  time          REAL NOT NULL,
  utilization   REAL,
  memory_used   INTEGER,
  memory_total  INTEGER,
  power_w       REAL,
  temperature_c REAL,
  PRIMARY KEY (run_id, node, device, time)
) WITHOUT ROWID;
)sql";

// v10: monotonic evidence for cost intervals (issue 33, D6): the CLOCK_BOOTTIME reading when an
// interval opened and closed, and the boot it opened in. A wall-clock step then changes no
// duration, limit or cost; rows without them (older stores, remote start times) use wall times.
constexpr const char* kV10 = R"sql(
ALTER TABLE cost_accruals ADD COLUMN start_boot REAL;
ALTER TABLE cost_accruals ADD COLUMN end_boot REAL;
ALTER TABLE cost_accruals ADD COLUMN boot_id TEXT;
ALTER TABLE cluster_accruals ADD COLUMN start_boot REAL;
ALTER TABLE cluster_accruals ADD COLUMN end_boot REAL;
ALTER TABLE cluster_accruals ADD COLUMN boot_id TEXT;
)sql";

// v11: the run queue and its scheduler (issue 37). A queue entry is a run not started yet, or one
// the scheduler started and watches (run_id), with where it may go, its priority and order, its
// deadline and money cap, its state and why it waits, the scheduler's last decision in words and
// as JSON (every place it weighed, with predicted time and cost), its sweep group and its restarts
// after preemptions (what the lost work cost). One scheduler at a time holds the lease (its pid, host
// and boot, renewed by a heartbeat). A sweep keeps its axes and its successive-halving settings.
// node_power: a rented node's idle limit and the stop/start commands of its owner (JSON arrays of
// arguments, never a shell line), whether it is on, and since when it has had no work; idle_accruals:
// what a powered node without a run costs, closed when autostop stops it.
constexpr const char* kV11 = R"sql(
CREATE TABLE queue_entries (
  id           INTEGER PRIMARY KEY,
  name         TEXT NOT NULL,
  config_toml  TEXT NOT NULL,
  config_path  TEXT NOT NULL DEFAULT '',
  places       TEXT NOT NULL DEFAULT '[]',
  priority     INTEGER NOT NULL DEFAULT 0,
  position     REAL NOT NULL,
  after_run    TEXT NOT NULL DEFAULT '',
  deadline     REAL,
  max_usd      REAL CHECK (max_usd > 0),
  state        TEXT NOT NULL DEFAULT 'queued' CHECK (state IN
                 ('queued','paused','starting','running','done','failed','cancelled')),
  run_id       INTEGER REFERENCES runs(id) ON DELETE SET NULL,
  place        TEXT NOT NULL DEFAULT '',
  why          TEXT NOT NULL DEFAULT '',
  decision     TEXT NOT NULL DEFAULT '{}',
  group_name   TEXT NOT NULL DEFAULT '',
  starts       INTEGER NOT NULL DEFAULT 0 CHECK (starts >= 0),
  max_restarts INTEGER NOT NULL DEFAULT 3 CHECK (max_restarts >= 0),
  claimed_by   TEXT NOT NULL DEFAULT '',
  lost_usd     REAL NOT NULL DEFAULT 0,
  lost_steps   INTEGER NOT NULL DEFAULT 0,
  created_at   REAL NOT NULL,
  updated_at   REAL NOT NULL
);
CREATE INDEX queue_by_state ON queue_entries(state, priority, position);
CREATE INDEX queue_by_group ON queue_entries(group_name);
CREATE TABLE scheduler_lease (
  id         INTEGER PRIMARY KEY CHECK (id = 1),
  token      TEXT NOT NULL,
  pid        INTEGER NOT NULL,
  host       TEXT NOT NULL,
  boot_id    TEXT NOT NULL DEFAULT '',
  origin     TEXT NOT NULL DEFAULT '',
  started_at REAL NOT NULL,
  heartbeat  REAL NOT NULL
);
CREATE TABLE sweeps (
  name        TEXT PRIMARY KEY NOT NULL,
  config_path TEXT NOT NULL DEFAULT '',
  spec        TEXT NOT NULL DEFAULT '{}',
  halving     TEXT NOT NULL DEFAULT '{}',
  created_at  REAL NOT NULL
);
CREATE TABLE node_power (
  node_id      INTEGER PRIMARY KEY REFERENCES nodes(id) ON DELETE CASCADE,
  idle_limit_s REAL CHECK (idle_limit_s > 0),
  stop_argv    TEXT NOT NULL DEFAULT '[]',
  start_argv   TEXT NOT NULL DEFAULT '[]',
  state        TEXT NOT NULL DEFAULT 'on' CHECK (state IN ('on','stopping','stopped','starting')),
  since        REAL NOT NULL DEFAULT 0,
  idle_since   REAL
);
CREATE TABLE idle_accruals (
  id           INTEGER PRIMARY KEY,
  node_id      INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
  start        REAL NOT NULL,
  end          REAL,
  usd_per_hour REAL NOT NULL CHECK (usd_per_hour >= 0),
  note         TEXT NOT NULL DEFAULT ''
);
CREATE INDEX idle_accruals_by_node ON idle_accruals(node_id, start);
)sql";

// v12: link matrices measured on the collective path (issue 36). A measurement is one run of the
// worker's `links` among some nodes, over the transport a run uses (gloo/tcp, nccl), stored with
// the run it was taken for (NULL: `flotilla nodes links` or the Nodes page), how long it took and
// the problems it met (a node that could not take part, in words). Its links: one row per ordered
// pair of nodes (from == to: the node's intra-node figure, two ranks on it), the one-way
// small-message latency and the large-message bandwidth from -> to, or why it was not measured.
// The reachability matrix of v6 (TCP connect to sshd) stays as it is. run_nodes.position: the
// order nodes were attached in, which is the launch's node order (node i holds ranks i*n ..
// i*n+n-1), so a process group's ranks map to the nodes (and links) it crosses.
constexpr const char* kV12 = R"sql(
ALTER TABLE run_nodes ADD COLUMN position INTEGER NOT NULL DEFAULT 0;
CREATE TABLE link_measurements (
  id          INTEGER PRIMARY KEY,
  measured_at REAL NOT NULL,
  transport   TEXT NOT NULL,
  run_id      INTEGER REFERENCES runs(id) ON DELETE CASCADE,
  seconds     REAL NOT NULL DEFAULT 0 CHECK (seconds >= 0),
  note        TEXT NOT NULL DEFAULT ''
);
CREATE INDEX link_measurements_by_run ON link_measurements(run_id);
CREATE TABLE node_links (
  measurement_id INTEGER NOT NULL REFERENCES link_measurements(id) ON DELETE CASCADE,
  from_node      INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
  to_node        INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
  latency_s      REAL CHECK (latency_s >= 0),
  bytes_per_s    REAL CHECK (bytes_per_s > 0),
  error          TEXT,
  PRIMARY KEY (measurement_id, from_node, to_node),
  CHECK ((latency_s IS NOT NULL AND bytes_per_s IS NOT NULL) OR error IS NOT NULL)
) WITHOUT ROWID;
CREATE INDEX node_links_by_pair ON node_links(from_node, to_node);
)sql";

}  // namespace

const std::vector<Migration>& builtin_migrations() {
  static const std::string v1 =
      "CREATE TABLE meta (\n"
      "  key   TEXT PRIMARY KEY NOT NULL,\n"
      "  value TEXT NOT NULL\n"
      ") WITHOUT ROWID;\n"
      "INSERT INTO meta(key, value) VALUES ('created_by_version', '" FLOTILLA_VERSION_STRING
      "');\n"
      "INSERT INTO meta(key, value) VALUES ('created_at', strftime('%Y-%m-%dT%H:%M:%SZ', 'now'));\n";
  static const std::vector<Migration> steps = {
      {1, "meta table", v1.c_str()},
      {2, "runs, metrics, checkpoints, events", kV2},
      {3, "nodes, clusters, system samples", kV3},
      {4, "pricing, cost accruals, budgets", kV4},
      {5, "ssh node fields: port, user, key path, labels", kV5},
      {6, "node latency matrix", kV6},
      {7, "run prices, node shares, wall-time caps, status notes", kV7},
      {8, "slurm clusters, partition prices, slurm jobs, cluster accruals", kV8},
      {9, "gpu readings of slurm jobs, devices allocated to a job", kV9},
      {10, "monotonic clock readings of cost intervals", kV10},
      {11, "run queue, scheduler lease, sweeps, node autostop", kV11},
      {12, "link matrices on the collective path", kV12},
  };
  return steps;
}

int current_schema_version() { return builtin_migrations().back().version; }

}  // namespace flotilla::db
