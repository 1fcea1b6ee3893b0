index cluster_accruals_by_run
CREATE INDEX cluster_accruals_by_run ON cluster_accruals(run_id, start_time);
index cost_accruals_by_node
CREATE INDEX cost_accruals_by_node ON cost_accruals(node_id, start_time);
index cost_accruals_by_run
CREATE INDEX cost_accruals_by_run ON cost_accruals(run_id, start_time);
index events_by_run
CREATE INDEX events_by_run ON events(run_id, time);
index idle_accruals_by_node
CREATE INDEX idle_accruals_by_node ON idle_accruals(node_id, start);
index link_measurements_by_run
CREATE INDEX link_measurements_by_run ON link_measurements(run_id);
index node_latency_by_to
CREATE INDEX node_latency_by_to ON node_latency(to_node);
index node_links_by_pair
CREATE INDEX node_links_by_pair ON node_links(from_node, to_node);
index queue_by_group
CREATE INDEX queue_by_group ON queue_entries(group_name);
index queue_by_state
CREATE INDEX queue_by_state ON queue_entries(state, priority, position);
index run_tags_by_tag
CREATE INDEX run_tags_by_tag ON run_tags(tag);
index runs_by_created
CREATE INDEX runs_by_created ON runs(created_at);
index runs_by_status
CREATE INDEX runs_by_status ON runs(status, created_at);
index slurm_jobs_by_cluster
CREATE INDEX slurm_jobs_by_cluster ON slurm_jobs(cluster_id, job_id);
table checkpoints
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
table cluster_accruals
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
, start_boot REAL, end_boot REAL, boot_id TEXT);
table cluster_partitions
CREATE TABLE cluster_partitions (
  cluster_id       INTEGER NOT NULL REFERENCES clusters(id) ON DELETE CASCADE,
  partition_name   TEXT NOT NULL,
  usd_per_gpu_hour REAL CHECK (usd_per_gpu_hour >= 0),
  usd_per_cpu_hour REAL CHECK (usd_per_cpu_hour >= 0),
  PRIMARY KEY (cluster_id, partition_name)
) WITHOUT ROWID;
table clusters
CREATE TABLE clusters (
  id       INTEGER PRIMARY KEY,
  name     TEXT NOT NULL UNIQUE,
  provider TEXT NOT NULL DEFAULT '',
  notes    TEXT NOT NULL DEFAULT ''
, kind TEXT NOT NULL DEFAULT '', login_host TEXT NOT NULL DEFAULT '', port INTEGER NOT NULL DEFAULT 22 CHECK (port BETWEEN 1 AND 65535), user TEXT NOT NULL DEFAULT '', key_path TEXT NOT NULL DEFAULT '', partition_name TEXT NOT NULL DEFAULT '', account TEXT NOT NULL DEFAULT '', probe_json TEXT NOT NULL DEFAULT '', probed_at REAL, created_at REAL NOT NULL DEFAULT 0);
table cost_accruals
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
, start_boot REAL, end_boot REAL, boot_id TEXT);
table events
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
table idle_accruals
CREATE TABLE idle_accruals (
  id           INTEGER PRIMARY KEY,
  node_id      INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
  start        REAL NOT NULL,
  end          REAL,
  usd_per_hour REAL NOT NULL CHECK (usd_per_hour >= 0),
  note         TEXT NOT NULL DEFAULT ''
);
table ingest_offsets
CREATE TABLE ingest_offsets (
  run_id     INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  source     TEXT NOT NULL,
  byte_offset INTEGER NOT NULL,
  updated_at REAL NOT NULL,
  PRIMARY KEY (run_id, source)
) WITHOUT ROWID;
table link_measurements
CREATE TABLE link_measurements (
  id          INTEGER PRIMARY KEY,
  measured_at REAL NOT NULL,
  transport   TEXT NOT NULL,
  run_id      INTEGER REFERENCES runs(id) ON DELETE CASCADE,
  seconds     REAL NOT NULL DEFAULT 0 CHECK (seconds >= 0),
  note        TEXT NOT NULL DEFAULT ''
);
table meta
CREATE TABLE meta (
  key   TEXT PRIMARY KEY NOT NULL,
  value TEXT NOT NULL
) WITHOUT ROWID;
table metric_blocks
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
table metrics
CREATE TABLE metrics (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  name   TEXT NOT NULL,
  step   INTEGER NOT NULL,
  value  REAL NOT NULL,
  time   REAL NOT NULL,
  PRIMARY KEY (run_id, name, step)
) WITHOUT ROWID;
table node_latency
CREATE TABLE node_latency (
  from_node   INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
  to_node     INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
  rtt_ms      REAL CHECK (rtt_ms >= 0),
  error       TEXT,
  measured_at REAL NOT NULL,
  PRIMARY KEY (from_node, to_node),
  CHECK (rtt_ms IS NOT NULL OR error IS NOT NULL)
) WITHOUT ROWID;
table node_links
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
table node_power
CREATE TABLE node_power (
  node_id      INTEGER PRIMARY KEY REFERENCES nodes(id) ON DELETE CASCADE,
  idle_limit_s REAL CHECK (idle_limit_s > 0),
  stop_argv    TEXT NOT NULL DEFAULT '[]',
  start_argv   TEXT NOT NULL DEFAULT '[]',
  state        TEXT NOT NULL DEFAULT 'on' CHECK (state IN ('on','stopping','stopped','starting')),
  since        REAL NOT NULL DEFAULT 0,
  idle_since   REAL
);
table node_pricing
CREATE TABLE node_pricing (
  node_id       INTEGER PRIMARY KEY REFERENCES nodes(id) ON DELETE CASCADE,
  pricing_id    INTEGER REFERENCES pricing(id) ON DELETE SET NULL,
  spot          INTEGER NOT NULL DEFAULT 0,
  usd_per_hour  REAL CHECK (usd_per_hour >= 0),
  power_w       REAL CHECK (power_w >= 0),
  tariff_usd_per_kwh REAL CHECK (tariff_usd_per_kwh >= 0)
);
table nodes
CREATE TABLE nodes (
  id         INTEGER PRIMARY KEY,
  name       TEXT NOT NULL UNIQUE,
  cluster_id INTEGER REFERENCES clusters(id) ON DELETE SET NULL,
  kind       TEXT NOT NULL DEFAULT 'local' CHECK (kind IN ('local','ssh')),
  host       TEXT NOT NULL DEFAULT '',
  gpu_type   TEXT NOT NULL DEFAULT '',
  gpu_count  INTEGER NOT NULL DEFAULT 0,
  created_at REAL NOT NULL
, port INTEGER NOT NULL DEFAULT 22 CHECK (port BETWEEN 1 AND 65535), user TEXT NOT NULL DEFAULT '', key_path TEXT NOT NULL DEFAULT '', labels TEXT NOT NULL DEFAULT '');
table pricing
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
table queue_entries
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
table run_nodes
CREATE TABLE run_nodes (
  run_id  INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  node_id INTEGER NOT NULL REFERENCES nodes(id) ON DELETE RESTRICT,
  devices INTEGER NOT NULL DEFAULT 1, usd_per_hour REAL CHECK (usd_per_hour >= 0), rate_source TEXT NOT NULL DEFAULT '', position INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (run_id, node_id)
) WITHOUT ROWID;
table run_tags
CREATE TABLE run_tags (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  tag    TEXT NOT NULL,
  PRIMARY KEY (run_id, tag)
) WITHOUT ROWID;
table runs
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
, budget_usd REAL, budget_warn_fraction REAL NOT NULL DEFAULT 0.8, usd_per_hour REAL CHECK (usd_per_hour >= 0), price_source TEXT NOT NULL DEFAULT '', max_hours REAL CHECK (max_hours > 0), status_note TEXT NOT NULL DEFAULT '');
table scheduler_lease
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
table slurm_job_samples
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
table slurm_jobs
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
, alloc_devices INTEGER CHECK (alloc_devices >= 0));
table sweeps
CREATE TABLE sweeps (
  name        TEXT PRIMARY KEY NOT NULL,
  config_path TEXT NOT NULL DEFAULT '',
  spec        TEXT NOT NULL DEFAULT '{}',
  halving     TEXT NOT NULL DEFAULT '{}',
  created_at  REAL NOT NULL
);
table system_samples
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
