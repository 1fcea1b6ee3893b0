#!/usr/bin/env python3
"""Writes tests/db/golden/vN.sql: a workspace database at every released schema version before the
current one, with sample rows, as SQL text (test_migrations opens each and migrates it).

Run once when a schema step is RELEASED, never to refresh an existing file: the point of a golden
file is that it was written by the old schema, so editing a released step in db/schema.cpp breaks
the test instead of silently changing what old workspaces get. Usage: make_golden.py VERSION
"""
import re
import sqlite3
import subprocess
import sys
import tempfile
import os

here = os.path.dirname(os.path.abspath(__file__))
schema = open(os.path.join(here, "..", "..", "..", "db", "schema.cpp")).read()
steps = {2: "kV2", 3: "kV3", 4: "kV4", 5: "kV5", 6: "kV6", 7: "kV7", 8: "kV8", 9: "kV9", 10: "kV10", 11: "kV11", 12: "kV12"}
sql = {v: re.search(r"constexpr const char\* %s = R\"sql\((.*?)\)sql\";" % name, schema, re.S).group(1)
       for v, name in steps.items()}
V1 = ("CREATE TABLE meta (\n  key   TEXT PRIMARY KEY NOT NULL,\n  value TEXT NOT NULL\n) WITHOUT ROWID;\n"
      "INSERT INTO meta(key, value) VALUES ('created_by_version', '0.1.0');\n"
      "INSERT INTO meta(key, value) VALUES ('created_at', '2025-01-01T00:00:00Z');\n")

DATA = {
    1: "INSERT INTO meta(key, value) VALUES ('note', 'golden v1');",
    2: """
INSERT INTO runs(id, name, status, config_toml, config_json, run_dir, created_at, started_at, ended_at, exit_code)
  VALUES (1, 'old-run', 'completed', '[run]\nname = "old-run"\n', '{"run":{"name":"old-run"},"train":{"steps":3}}',
          '/tmp/old-run', 1735689600, 1735689601, 1735689700, 0);
INSERT INTO runs(id, name, status, created_at) VALUES (2, 'paused-run', 'created', 1735689800);
INSERT INTO run_tags VALUES (1, 'baseline');
INSERT INTO metrics VALUES (1, 'loss', 1, 5.5, 1735689610), (1, 'loss', 2, 4.25, 1735689620),
  (1, 'loss', 3, 3.75, 1735689630), (1, 'tokens', 3, 3072, 1735689630);
INSERT INTO metric_blocks VALUES (1, 'loss', 0, 3, 3.75, 5.5, 1, 3, 3.75, 1735689630),
  (1, 'tokens', 0, 1, 3072, 3072, 3, 3, 3072, 1735689630);
INSERT INTO checkpoints VALUES (1, 3, '/tmp/old-run/checkpoints/step-00000003', 1024, 0.5, 'final', 1735689631);
INSERT INTO events(run_id, time, kind, level, message) VALUES (1, 1735689700, 'status', 'info', 'running -> completed');
INSERT INTO ingest_offsets VALUES (1, '/tmp/old-run/metrics.jsonl', 4096, 1735689700);
""",
    3: """
INSERT INTO clusters(id, name, provider) VALUES (1, 'lab', 'own');
INSERT INTO nodes(id, name, cluster_id, kind, host, gpu_type, gpu_count, created_at)
  VALUES (1, 'local', NULL, 'local', '', '', 0, 1735689600), (2, 'gpu-box', 1, 'ssh', 'gpu-box.lan', 'RTX-4090', 2, 1735689600);
INSERT INTO system_samples VALUES (2, 0, 1735689650, 97.5, 20000000000, 25769803776, 410.0, 71.0);
INSERT INTO run_nodes VALUES (1, 2, 2);
""",
    4: """
INSERT INTO pricing(id, provider, item, gpu_type, gpus, on_demand_usd_per_hour, spot_usd_per_hour, as_of, source)
  VALUES (1, 'own', 'gpu-box', 'RTX-4090', 2, 1.5, NULL, '2025-01-01', 'golden');
INSERT INTO node_pricing(node_id, pricing_id, spot, usd_per_hour) VALUES (2, NULL, 0, 1.5);
INSERT INTO cost_accruals(run_id, node_id, status, start_time, end_time, devices, usd_per_hour, rate_source)
  VALUES (1, 2, 'running', 1735689601, 1735689700, 2, 1.5, 'flat $1.50/h');
""",
    5: """
UPDATE nodes SET port = 2222, user = 'ana', key_path = '/home/ana/.ssh/id_ed25519', labels = 'zone:eu,a100' WHERE id = 2;
INSERT INTO nodes(id, name, kind, host, port, user, labels, created_at)
  VALUES (3, 'spot-b', 'ssh', '10.0.0.7', 22, '', 'spot', 1735689900);
""",
    6: """
INSERT INTO node_latency VALUES (1, 2, 0.42, NULL, 1735690000), (2, 3, NULL, 'refused', 1735690000);
""",
    7: """
UPDATE runs SET usd_per_hour = 1.5, price_source = 'flat $1.50/h', max_hours = 2.0, status_note = 'golden v7' WHERE id = 1;
UPDATE run_nodes SET usd_per_hour = 1.5, rate_source = 'flat $1.50/h' WHERE run_id = 1;
""",
    8: """
INSERT INTO clusters(id, name, provider, kind, login_host, port, user, key_path, partition_name, account, probe_json, probed_at, created_at)
  VALUES (2, 'flo', '', 'slurm', 'login.lab', 22, 'ana', '', 'gpu', '', '{}', 1735690100, 1735690000);
INSERT INTO cluster_partitions VALUES (2, 'gpu', 2.5, NULL);
INSERT INTO runs(id, name, status, config_toml, config_json, target, created_at, started_at, ended_at, exit_code, usd_per_hour)
  VALUES (3, 'on-slurm', 'stopped', '', '{}', 'slurm:flo', 1735690200, 1735690300, 1735690400, 10, 20.0);
INSERT INTO slurm_jobs(run_id, cluster_id, job_id, partition_name, run_dir, state, reason, restarts, nodes, gpus_per_node, tasks_per_node, script, submitted_at)
  VALUES (3, 2, '41', 'gpu', '/home/ana/.flotilla/runs/on-slurm-3', 'CANCELLED', '', 1, 2, 4, 4, '#!/bin/sh', 1735690200);
INSERT INTO cluster_accruals(run_id, cluster_id, status, start_time, end_time, devices, usd_per_hour, rate_source)
  VALUES (3, 2, 'running', 1735690300, 1735690400, 8, 20.0, 'partition gpu');
""",
    9: """
UPDATE slurm_jobs SET alloc_devices = 8 WHERE run_id = 3;
INSERT INTO slurm_job_samples VALUES (3, 'n1', 0, 1735690350, 88.0, 1000, 2000, 300.0, 60.0);
""",
    10: """
UPDATE cost_accruals SET start_boot = 1000.0, end_boot = 1099.0, boot_id = 'golden-boot';
""",
    11: """
INSERT INTO queue_entries(id, name, config_toml, places, priority, position, state, run_id, place, why, created_at, updated_at)
  VALUES (1, 'queued-run', '[run]\nname = "queued-run"\n', '["local"]', 0, 1.0, 'done', 1, 'local', 'started', 1735689600, 1735689700);
INSERT INTO sweeps(name, spec, created_at) VALUES ('golden-sweep', '{"lr":[0.001]}', 1735689600);
""",
}


def main():
    version = int(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "g.db")
        db = sqlite3.connect(path)
        db.executescript(V1)
        db.executescript(DATA[1])
        # Each step's rows right after the step, as a workspace of that version would hold them (a
        # later step may add columns that an older row's positional INSERT does not list).
        for v in range(2, version + 1):
            db.executescript(sql[v])
            db.executescript(DATA[v])
        db.commit()
        db.close()
        dump = subprocess.run(["sqlite3", path, ".dump"], check=True, capture_output=True, text=True).stdout
    out = os.path.join(here, "v%d.sql" % version)
    with open(out, "w") as f:
        f.write("-- Flotilla workspace database at schema version %d, written by make_golden.py. Never edit.\n" % version)
        f.write(dump)
        f.write("PRAGMA user_version = %d;\n" % version)
    print("wrote", out)


main()
