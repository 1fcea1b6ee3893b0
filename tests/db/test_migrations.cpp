// Schema migrations from every released version (tests/db/golden/vN.sql, written by that schema
// and never edited) to the current one: user data survives, the resulting schema is exactly a
// fresh database's and exactly tests/db/golden/schema.sql, and a newer file is refused untouched.
#include <sqlite3.h>

#include <string>

#include "db/clusters.h"
#include "db/costs.h"
#include "db/database.h"
#include "db/errors.h"
#include "db/queries.h"
#include "db/run_store.h"
#include "store_fixture.h"

using namespace flotilla::db;
using namespace store_test;

namespace {

const fs::path kGolden = fs::path(FLOTILLA_SOURCE_DIR) / "tests" / "db" / "golden";

// Builds a database file from a golden SQL text with the raw library (no Flotilla code involved).
void build_from_sql(const fs::path& db_path, const std::string& sql) {
  sqlite3* raw = nullptr;
  CHECK(sqlite3_open(db_path.c_str(), &raw) == SQLITE_OK);
  char* err = nullptr;
  const int rc = sqlite3_exec(raw, sql.c_str(), nullptr, nullptr, &err);
  CHECK_MSG(rc == SQLITE_OK, "golden SQL failed: %s", err ? err : "?");
  sqlite3_free(err);
  sqlite3_close(raw);
}

std::string schema_text(const std::string& path) {
  sqlite3* raw = nullptr;
  std::string out;
  sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READONLY, nullptr);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(raw,
                     "SELECT type, name, coalesce(sql, '') FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%' "
                     "ORDER BY type, name",
                     -1, &st, nullptr);
  while (sqlite3_step(st) == SQLITE_ROW) {
    out += reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    out += " ";
    out += reinterpret_cast<const char*>(sqlite3_column_text(st, 1));
    out += "\n";
    out += reinterpret_cast<const char*>(sqlite3_column_text(st, 2));
    out += ";\n";
  }
  sqlite3_finalize(st);
  sqlite3_close(raw);
  return out;
}

void test_fresh_schema_matches_golden(const fs::path& dir) {
  const fs::path path = dir / "fresh.db";
  { Database db(path.string()); }
  const std::string actual = schema_text(path.string());
  const std::string expected = read_bytes(kGolden / "schema.sql");
  if (actual != expected) write_bytes(dir / "schema.actual.sql", actual);
  CHECK_MSG(
      actual == expected,
      "the schema differs from tests/db/golden/schema.sql; see %s/schema.actual.sql (a new step must also "
      "add tests/db/golden/v<previous>.sql with make_golden.py)",
      dir.c_str());
}

void test_migrate_from(int version, const fs::path& dir) {
  const fs::path golden = kGolden / ("v" + std::to_string(version) + ".sql");
  CHECK_MSG(fs::exists(golden), "missing %s", golden.c_str());
  const fs::path path = dir / ("from-v" + std::to_string(version) + ".db");
  build_from_sql(path, read_bytes(golden));
  CHECK(raw_int(path.string(), "PRAGMA user_version") == version);
  {
    Database db(path.string());
    CHECK(db.schema_version() == current_schema_version());
    CHECK(db.meta("note") == "golden v1");  // v1 data kept
    CHECK(db.meta("created_at") == "2025-01-01T00:00:00Z");
    if (version >= 2) {
      const Run old = get_run(db, "old-run");
      CHECK(old.status == RunStatus::kCompleted);
      CHECK(old.tags.size() == 1 && old.tags[0] == "baseline");
      CHECK(!old.budget_usd);                            // v4 column, NULL for old rows
      CHECK_NEAR(old.budget_warn_fraction, 0.8, 1e-12);  // v4 default
      const auto series = metric_series(db, old.id, "loss", 10);
      CHECK(series.size() == 3);
      CHECK(!series.empty() && series.back().last == 3.75);
    }
    if (version >= 3) {
      const auto node = find_node(db, "gpu-box");
      CHECK(node && node->gpu_count == 2);
    }
    if (version >= 4) {
      // v10: an interval stored before the monotonic readings existed is charged by its wall times.
      CHECK_NEAR(run_cost_usd(db, get_run(db, "old-run").id), 1.5 * 99 / 3600, 1e-9);
    }
    if (version >= 8) {
      const Run slurm = get_run(db, "on-slurm");
      const auto job = find_slurm_job(db, slurm.id);
      CHECK(job && job->job_id == "41" && job->gpus_per_node == 4 && job->restarts == 1);
      // v9: the run's GPU readings, and a resubmission of its job.
      insert_job_samples(db, {{slurm.id, "n1", 0, 1735690350, 91.0, {}, {}, {}, {}}});
      CHECK(job_samples(db, slurm.id).size() == 1);
      resubmit_slurm_job(db, slurm.id, "42", 1735690500);
      const auto again = find_slurm_job(db, slurm.id);
      CHECK(again && again->job_id == "42" && again->state == "PENDING" && again->restarts == 0);
    }
    // The new tables work: write through them.
    const int64_t id = store_test::make_run(db, "after-migration");
    const int64_t node = ensure_node(db, "local", "local");
    attach_node(db, id, node, 1);
    set_status(db, id, RunStatus::kRunning, 100);
    set_status(db, id, RunStatus::kCompleted, 200);
  }
  CHECK(raw_text(path.string(), "PRAGMA integrity_check") == "ok");
  CHECK(raw_text(path.string(), "PRAGMA foreign_key_check") == "");
  // The migrated schema is exactly a fresh one (no step depends on the path taken).
  CHECK_MSG(schema_text(path.string()) == schema_text((dir / "fresh.db").string()),
            "schema after migrating from v%d differs from a fresh database", version);
}

void test_newer_is_refused(const fs::path& dir) {
  const fs::path path = dir / "newer.db";
  { Database db(path.string()); }
  const int newer = current_schema_version() + 1;
  sqlite3* raw = nullptr;
  sqlite3_open(path.c_str(), &raw);
  sqlite3_exec(raw, ("PRAGMA user_version = " + std::to_string(newer)).c_str(), nullptr, nullptr, nullptr);
  sqlite3_exec(raw, "PRAGMA journal_mode=DELETE", nullptr, nullptr, nullptr);
  sqlite3_close(raw);
  const std::string before = read_bytes(path);
  CHECK_THROWS(Database db(path.string()), "newer Flotilla");
  try {
    Database db(path.string());
  } catch (const DbError& e) {
    CHECK(e.kind() == DbErrorKind::kTooNew);
    CHECK(std::string(e.what()).find("schema version " + std::to_string(newer)) != std::string::npos);
  }
  CHECK(read_bytes(path) == before);
}

}  // namespace

int main() {
  const fs::path dir = scratch("db_migrations", "all");
  test_fresh_schema_matches_golden(dir);
  for (int v = 1; v < current_schema_version(); ++v) test_migrate_from(v, dir);
  test_newer_is_refused(dir);
  return flotilla_test::summary("test_migrations");
}
