// docs/reliability.md D4 for the run store: garbage, truncated and foreign files are refused with a
// clear message and left untouched, on both integrity paths (the full quick_check of small files
// and the header check of big ones), and a store with runs is never recreated over.
#include <sqlite3.h>

#include <string>

#include "db/database.h"
#include "db/errors.h"
#include "db/metric_sink.h"
#include "db/run_store.h"
#include "store_fixture.h"

using namespace flotilla::db;
using namespace store_test;

namespace {

void expect_refused(const fs::path& p, DbErrorKind kind, const std::string& fragment, const OpenOptions& o) {
  const std::string before = read_bytes(p);
  ++flotilla_test::checks();
  try {
    Database db(p.string(), o);
    ++flotilla_test::failures();
    std::fprintf(stderr, "%s opened; expected a refusal containing '%s'\n", p.c_str(), fragment.c_str());
  } catch (const DbError& e) {
    CHECK_MSG(e.kind() == kind, "%s: kind %d: %s", p.c_str(), static_cast<int>(e.kind()), e.what());
    CHECK_MSG(std::string(e.what()).find(fragment) != std::string::npos, "%s: message lacks '%s': %s",
              p.c_str(), fragment.c_str(), e.what());
    CHECK_MSG(std::string(e.what()).find(p.string()) != std::string::npos, "message does not name the file");
  }
  CHECK(read_bytes(p) == before);
}

// A store with a run and enough metric rows to span many pages, checkpointed into the main file.
void make_store(const fs::path& p) {
  Database db(p.string());
  const int64_t run = make_run(db, "precious");
  MetricSink sink(db);
  std::vector<MetricRow> rows;
  for (int s = 1; s <= 20000; ++s) rows.push_back({run, "loss", s, 1.0 / s, 1.7e9 + s});
  db.write_transaction([&] { sink.insert(rows); });
  db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
}

}  // namespace

int main() {
  const fs::path dir = scratch("db_damaged_d4", "all");
  OpenOptions full, header;
  header.full_check_max_bytes = 4096;  // every test file counts as "big": the header path

  for (const OpenOptions* o : {&full, &header}) {
    const std::string tag = o == &full ? "full" : "header";
    // Garbage.
    const fs::path garbage = dir / (tag + "-garbage.db");
    std::string junk;
    for (int i = 0; i < 4000; ++i) junk += static_cast<char>((i * 7919) & 0xff);
    write_bytes(garbage, junk);
    expect_refused(garbage, DbErrorKind::kDamaged, "damaged", *o);

    // Truncated: a real store cut in half.
    const fs::path truncated = dir / (tag + "-truncated.db");
    make_store(truncated);
    const std::string whole = read_bytes(truncated);
    fs::remove(truncated.string() + "-wal");
    fs::remove(truncated.string() + "-shm");
    write_bytes(truncated, whole.substr(0, whole.size() / 2));
    expect_refused(truncated, DbErrorKind::kDamaged, "damaged", *o);

    // Foreign: another program's database, and one claiming a schema version we never wrote.
    const fs::path foreign = dir / (tag + "-foreign.db");
    sqlite3* raw = nullptr;
    sqlite3_open(foreign.c_str(), &raw);
    sqlite3_exec(raw,
                 "CREATE TABLE moz_places(id INTEGER PRIMARY KEY, url TEXT); INSERT INTO moz_places(url) "
                 "VALUES ('https://example.org');",
                 nullptr, nullptr, nullptr);
    sqlite3_close(raw);
    expect_refused(foreign, DbErrorKind::kDamaged, "another program", *o);
    const fs::path v7 = dir / (tag + "-v7.db");
    sqlite3_open(v7.c_str(), &raw);
    sqlite3_exec(raw, "CREATE TABLE meta(key, value); PRAGMA user_version = 77;", nullptr, nullptr, nullptr);
    sqlite3_close(raw);
    expect_refused(v7, DbErrorKind::kTooNew, "schema version 77", *o);
  }
  // The header path reports truncation precisely.
  {
    const fs::path t = dir / "header-truncated.db";
    try {
      Database db(t.string(), header);
    } catch (const DbError& e) {
      CHECK_MSG(std::string(e.what()).find("truncated") != std::string::npos, "%s", e.what());
    }
  }
  // An intact store opens on both paths with its data.
  const fs::path good = dir / "good.db";
  make_store(good);
  for (const OpenOptions* o : {&full, &header}) {
    Database db(good.string(), *o);
    CHECK(get_run(db, "precious").name == "precious");
  }
  return flotilla_test::summary("test_damaged_d4");
}
