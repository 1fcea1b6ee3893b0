// The second audit's D22: a Flotilla store with a table or a column of its schema version dropped
// (by hand or by another program) is refused at open as damaged, naming what is missing, on both
// integrity paths, and the file is left byte for byte as it was. A table dropped while a store is
// open (after the open's check) gives a message that says what is wrong, never SQLite's bare
// "preparing 'SELECT ...': no such table".
#include <sqlite3.h>

#include <string>

#include "db/database.h"
#include "db/errors.h"
#include "db/metric_sink.h"
#include "db/queries.h"
#include "db/run_store.h"
#include "store_fixture.h"

using namespace flotilla::db;
using namespace store_test;

namespace {

// A store with a run and a few metric rows, checkpointed into the main file and closed.
void make_store(const fs::path& p) {
  Database db(p.string());
  const int64_t run = make_run(db, "precious");
  MetricSink sink(db);
  std::vector<MetricRow> rows;
  for (int s = 1; s <= 50; ++s) rows.push_back({run, "loss", s, 1.0 / s, 1.7e9 + s});
  db.write_transaction([&] { sink.insert(rows); });
  db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
}

// Runs `sql` on its own raw connection, as another program would.
void tamper(const fs::path& p, const std::string& sql) {
  sqlite3* raw = nullptr;
  sqlite3_open(p.c_str(), &raw);
  char* err = nullptr;
  const int rc =
      sqlite3_exec(raw, (sql + "; PRAGMA wal_checkpoint(TRUNCATE);").c_str(), nullptr, nullptr, &err);
  CHECK_MSG(rc == SQLITE_OK, "%s: %s", sql.c_str(), err ? err : "");
  sqlite3_free(err);
  sqlite3_close(raw);
}

void expect_refused(const fs::path& p, const std::string& fragment, const OpenOptions& o) {
  const std::string before = read_bytes(p);
  ++flotilla_test::checks();
  try {
    Database db(p.string(), o);
    ++flotilla_test::failures();
    std::fprintf(stderr, "%s opened; expected a refusal containing '%s'\n", p.c_str(), fragment.c_str());
  } catch (const DbError& e) {
    const std::string m = e.what();
    CHECK_MSG(e.kind() == DbErrorKind::kDamaged, "kind %d: %s", static_cast<int>(e.kind()), e.what());
    CHECK_MSG(m.find(fragment) != std::string::npos, "message lacks '%s': %s", fragment.c_str(), e.what());
    CHECK_MSG(m.find(p.string()) != std::string::npos &&
                  m.find("Flotilla did not change the file") != std::string::npos,
              "%s", e.what());
  }
  CHECK(read_bytes(p) == before);
}

}  // namespace

int main() {
  const fs::path dir = scratch("db_missing_table_d22", "all");
  OpenOptions full, header;
  header.full_check_max_bytes = 4096;  // every test file counts as "big": the header path
  for (const OpenOptions* o : {&full, &header}) {
    const std::string tag = o == &full ? "full" : "header";
    const fs::path table = dir / (tag + "-table.db");
    make_store(table);
    tamper(table, "DROP TABLE metrics");
    expect_refused(table,
                   "lacks the table 'metrics', which its schema version " +
                       std::to_string(current_schema_version()) + " defines",
                   *o);
    const fs::path column = dir / (tag + "-column.db");
    make_store(column);
    tamper(column, "ALTER TABLE runs DROP COLUMN status_note");
    expect_refused(column, "lacks the column 'status_note' of table 'runs'", *o);
    const fs::path several = dir / (tag + "-several.db");
    make_store(several);
    tamper(several,
           "DROP TABLE events; DROP TABLE checkpoints; DROP TABLE run_tags; DROP TABLE metric_blocks");
    expect_refused(several, "(and 1 more)", *o);
  }
  // An intact store still opens, with its data.
  const fs::path good = dir / "good.db";
  make_store(good);
  {
    Database db(good.string());
    CHECK(get_run(db, "precious").name == "precious");
    CHECK(metric_points(db, get_run(db, "precious").id, "loss").size() == 50);
  }
  // Dropped while open: the query's error says what is wrong and names the file.
  {
    Database db(good.string());
    const int64_t id = get_run(db, "precious").id;
    tamper(good, "DROP TABLE metrics");
    ++flotilla_test::checks();
    try {
      metric_points(db, id, "loss");
      ++flotilla_test::failures();
      std::fprintf(stderr, "a query on a dropped table succeeded\n");
    } catch (const DbError& e) {
      const std::string m = e.what();
      CHECK_MSG(e.kind() == DbErrorKind::kDamaged, "kind %d: %s", static_cast<int>(e.kind()), e.what());
      CHECK_MSG(m.rfind("preparing", 0) != 0 && m.find("lacks part of its schema") != std::string::npos &&
                    m.find("no such table: metrics") != std::string::npos &&
                    m.find(good.string()) != std::string::npos,
                "%s", e.what());
    }
  }
  return flotilla_test::summary("test_missing_table_d22");
}
