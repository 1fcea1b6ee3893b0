-- Flotilla workspace database at schema version 1, written by make_golden.py. Never edit.
PRAGMA foreign_keys=OFF;
BEGIN TRANSACTION;
CREATE TABLE meta (
  key   TEXT PRIMARY KEY NOT NULL,
  value TEXT NOT NULL
) WITHOUT ROWID;
INSERT INTO meta VALUES('created_at','2025-01-01T00:00:00Z');
INSERT INTO meta VALUES('created_by_version','0.1.0');
INSERT INTO meta VALUES('note','golden v1');
COMMIT;
PRAGMA user_version = 1;
