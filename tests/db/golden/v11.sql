-- Flotilla workspace database at schema version 11, written by make_golden.py. Never edit.
PRAGMA foreign_keys=OFF;
BEGIN TRANSACTION;
CREATE TABLE meta (
  key   TEXT PRIMARY KEY NOT NULL,
  value TEXT NOT NULL
) WITHOUT ROWID;
INSERT INTO meta VALUES('created_at','2025-01-01T00:00:00Z');
INSERT INTO meta VALUES('created_by_version','0.1.0');
INSERT INTO meta VALUES('note','golden v1');
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
INSERT INTO runs VALUES(1,'old-run','completed',replace('[run]\nname = "old-run"\n','\n',char(10)),'{"run":{"name":"old-run"},"train":{"steps":3}}','local','/tmp/old-run',NULL,NULL,'',1735689600.0,1735689601.0,1735689700.0,0,NULL,NULL,NULL,NULL,NULL,0.8000000000000000444,1.5,'flat $1.50/h',2.0,'golden v7');
INSERT INTO runs VALUES(2,'paused-run','created','','{}','local','',NULL,NULL,'',1735689800.0,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,0.8000000000000000444,NULL,'',NULL,'');
INSERT INTO runs VALUES(3,'on-slurm','stopped','','{}','slurm:flo','',NULL,NULL,'',1735690200.0,1735690300.0,1735690400.0,10,NULL,NULL,NULL,NULL,NULL,0.8000000000000000444,20.0,'',NULL,'');
CREATE TABLE run_tags (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  tag    TEXT NOT NULL,
  PRIMARY KEY (run_id, tag)
) WITHOUT ROWID;
INSERT INTO run_tags VALUES(1,'baseline');
CREATE TABLE metrics (
  run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  name   TEXT NOT NULL,
  step   INTEGER NOT NULL,
  value  REAL NOT NULL,
  time   REAL NOT NULL,
  PRIMARY KEY (run_id, name, step)
) WITHOUT ROWID;
INSERT INTO metrics VALUES(1,'loss',1,5.5,1735689610.0);
INSERT INTO metrics VALUES(1,'loss',2,4.25,1735689620.0);
INSERT INTO metrics VALUES(1,'loss',3,3.75,1735689630.0);
INSERT INTO metrics VALUES(1,'tokens',3,3072.0,1735689630.0);
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
INSERT INTO metric_blocks VALUES(1,'loss',0,3,3.75,5.5,1,3,3.75,1735689630.0);
INSERT INTO metric_blocks VALUES(1,'tokens',0,1,3072.0,3072.0,3,3,3072.0,1735689630.0);
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
INSERT INTO checkpoints VALUES(1,3,'/tmp/old-run/checkpoints/step-00000003',1024,0.5,'final',1735689631.0);
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
INSERT INTO events VALUES(1,1,1735689700.0,'status','info',0,'running -> completed','{}');
CREATE TABLE ingest_offsets (
  run_id     INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  source     TEXT NOT NULL,
  byte_offset INTEGER NOT NULL,
  updated_at REAL NOT NULL,
  PRIMARY KEY (run_id, source)
) WITHOUT ROWID;
INSERT INTO ingest_offsets VALUES(1,'/tmp/old-run/metrics.jsonl',4096,1735689700.0);
CREATE TABLE clusters (
  id       INTEGER PRIMARY KEY,
  name     TEXT NOT NULL UNIQUE,
  provider TEXT NOT NULL DEFAULT '',
  notes    TEXT NOT NULL DEFAULT ''
, kind TEXT NOT NULL DEFAULT '', login_host TEXT NOT NULL DEFAULT '', port INTEGER NOT NULL DEFAULT 22 CHECK (port BETWEEN 1 AND 65535), user TEXT NOT NULL DEFAULT '', key_path TEXT NOT NULL DEFAULT '', partition_name TEXT NOT NULL DEFAULT '', account TEXT NOT NULL DEFAULT '', probe_json TEXT NOT NULL DEFAULT '', probed_at REAL, created_at REAL NOT NULL DEFAULT 0);
INSERT INTO clusters VALUES(1,'lab','own','','','',22,'','','','','',NULL,0.0);
INSERT INTO clusters VALUES(2,'flo','','','slurm','login.lab',22,'ana','','gpu','','{}',1735690100.0,1735690000.0);
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
INSERT INTO nodes VALUES(1,'local',NULL,'local','','',0,1735689600.0,22,'','','');
INSERT INTO nodes VALUES(2,'gpu-box',1,'ssh','gpu-box.lan','RTX-4090',2,1735689600.0,2222,'ana','/home/ana/.ssh/id_ed25519','zone:eu,a100');
INSERT INTO nodes VALUES(3,'spot-b',NULL,'ssh','10.0.0.7','',0,1735689900.0,22,'','','spot');
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
INSERT INTO system_samples VALUES(2,0,1735689650.0,97.5,20000000000,25769803776,410.0,71.0);
CREATE TABLE run_nodes (
  run_id  INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
  node_id INTEGER NOT NULL REFERENCES nodes(id) ON DELETE RESTRICT,
  devices INTEGER NOT NULL DEFAULT 1, usd_per_hour REAL CHECK (usd_per_hour >= 0), rate_source TEXT NOT NULL DEFAULT '',
  PRIMARY KEY (run_id, node_id)
) WITHOUT ROWID;
INSERT INTO run_nodes VALUES(1,2,2,1.5,'flat $1.50/h');
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
INSERT INTO pricing VALUES(1,'own','gpu-box','RTX-4090',2,1.5,NULL,'2025-01-01','golden',0);
CREATE TABLE node_pricing (
  node_id       INTEGER PRIMARY KEY REFERENCES nodes(id) ON DELETE CASCADE,
  pricing_id    INTEGER REFERENCES pricing(id) ON DELETE SET NULL,
  spot          INTEGER NOT NULL DEFAULT 0,
  usd_per_hour  REAL CHECK (usd_per_hour >= 0),
  power_w       REAL CHECK (power_w >= 0),
  tariff_usd_per_kwh REAL CHECK (tariff_usd_per_kwh >= 0)
);
INSERT INTO node_pricing VALUES(2,NULL,0,1.5,NULL,NULL);
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
INSERT INTO cost_accruals VALUES(1,1,2,'running',1735689601.0,1735689700.0,2,1.5,'flat $1.50/h',1000.0,1099.0,'golden-boot');
CREATE TABLE node_latency (
  from_node   INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
  to_node     INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
  rtt_ms      REAL CHECK (rtt_ms >= 0),
  error       TEXT,
  measured_at REAL NOT NULL,
  PRIMARY KEY (from_node, to_node),
  CHECK (rtt_ms IS NOT NULL OR error IS NOT NULL)
) WITHOUT ROWID;
INSERT INTO node_latency VALUES(1,2,0.41999999999999998445,NULL,1735690000.0);
INSERT INTO node_latency VALUES(2,3,NULL,'refused',1735690000.0);
CREATE TABLE cluster_partitions (
  cluster_id       INTEGER NOT NULL REFERENCES clusters(id) ON DELETE CASCADE,
  partition_name   TEXT NOT NULL,
  usd_per_gpu_hour REAL CHECK (usd_per_gpu_hour >= 0),
  usd_per_cpu_hour REAL CHECK (usd_per_cpu_hour >= 0),
  PRIMARY KEY (cluster_id, partition_name)
) WITHOUT ROWID;
INSERT INTO cluster_partitions VALUES(2,'gpu',2.5,NULL);
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
INSERT INTO slurm_jobs VALUES(3,2,'41','gpu','/home/ana/.flotilla/runs/on-slurm-3','CANCELLED','',1,2,4,4,'#!/bin/sh',1735690200.0,8);
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
INSERT INTO cluster_accruals VALUES(1,3,2,'running',1735690300.0,1735690400.0,8,20.0,'partition gpu',NULL,NULL,NULL);
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
INSERT INTO slurm_job_samples VALUES(3,'n1',0,1735690350.0,88.0,1000,2000,300.0,60.0);
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
INSERT INTO queue_entries VALUES(1,'queued-run',replace('[run]\nname = "queued-run"\n','\n',char(10)),'','["local"]',0,1.0,'',NULL,NULL,'done',1,'local','started','{}','',0,3,'',0.0,0,1735689600.0,1735689700.0);
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
INSERT INTO sweeps VALUES('golden-sweep','','{"lr":[0.001]}','{}',1735689600.0);
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
CREATE INDEX runs_by_status ON runs(status, created_at);
CREATE INDEX runs_by_created ON runs(created_at);
CREATE INDEX run_tags_by_tag ON run_tags(tag);
CREATE INDEX events_by_run ON events(run_id, time);
CREATE INDEX cost_accruals_by_run ON cost_accruals(run_id, start_time);
CREATE INDEX cost_accruals_by_node ON cost_accruals(node_id, start_time);
CREATE INDEX node_latency_by_to ON node_latency(to_node);
CREATE INDEX slurm_jobs_by_cluster ON slurm_jobs(cluster_id, job_id);
CREATE INDEX cluster_accruals_by_run ON cluster_accruals(run_id, start_time);
CREATE INDEX queue_by_state ON queue_entries(state, priority, position);
CREATE INDEX queue_by_group ON queue_entries(group_name);
CREATE INDEX idle_accruals_by_node ON idle_accruals(node_id, start);
COMMIT;
PRAGMA user_version = 11;
