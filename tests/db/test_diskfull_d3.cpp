// docs/reliability.md D3: the database's storage fills up (injected with PRAGMA max_page_count on the
// writer's connection, which makes SQLite return SQLITE_FULL exactly as a full disk does).
// The writer reports a clear "full" error and drops rows with a counter; the producer (training)
// is never blocked; a file ingest keeps its offset and resumes once space is back; afterwards
// integrity_check is ok and nothing is missing or doubled.
#include <chrono>
#include <string>

#include "db/errors.h"
#include "db/ingest.h"
#include "db/sql.h"
#include "db/writer.h"
#include "store_fixture.h"

using namespace flotilla::db;
using namespace store_test;

namespace {

std::string step_line(int64_t step) {
  return "{\"v\":1,\"type\":\"step\",\"time\":1700000000,\"rank\":0,\"step\":" + std::to_string(step) +
         ",\"loss\":2.5,\"tokens\":" + std::to_string(step * 100) +
         ",\"lr\":0.1,\"grad_norm\":1,\"mfu\":0.3}\n";
}

}  // namespace

int main() {
  const fs::path dir = scratch("db_diskfull_d3", "all");
  const std::string path = (dir / "full.db").string();
  Writer w(path);
  int64_t run = 0;
  int64_t pages = 0;
  w.run([&](Database& db) {
    run = make_run(db, "full");
    pages = query_int(db, "PRAGMA page_count");
  });
  // The "disk" has room for a few more pages only.
  w.run([&](Database& db) { db.exec("PRAGMA max_page_count = " + std::to_string(pages + 8)); });

  // 1. The producer keeps appending while the store is full; no call blocks.
  double worst_ms = 0;
  Ticket last = 0;
  for (int64_t s = 1; s <= 20000; s += 100) {
    std::vector<MetricRow> rows;
    for (int64_t k = s; k < s + 100; ++k) rows.push_back({run, "loss", k, 1.0, 1.7e9});
    const auto t0 = std::chrono::steady_clock::now();
    last = w.append(std::move(rows));
    worst_ms = std::max(
        worst_ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  CHECK(!w.wait(last));
  CHECK(!w.flush());
  const WriterStats st = w.stats();
  CHECK(st.dropped_rows > 0);
  CHECK(st.committed_rows + st.dropped_rows == 20000);
  CHECK_MSG(st.last_error.find("full") != std::string::npos, "error: %s", st.last_error.c_str());
  CHECK_MSG(worst_ms < 50, "an append blocked for %.1f ms", worst_ms);

  // 2. A file ingest while full: a clear error, and the offset stays at the last committed line.
  const fs::path jsonl = dir / "metrics.jsonl";
  std::string text;
  for (int s = 1; s <= 3000; ++s) text += step_line(s);
  write_bytes(jsonl, text);
  FileIngestor fi(w, run, jsonl.string(), "metrics.jsonl");
  bool threw_full = false;
  try {
    fi.poll();
  } catch (const DbError& e) {
    threw_full = e.kind() == DbErrorKind::kFull && std::string(e.what()).find("full") != std::string::npos;
  }
  CHECK(threw_full);
  CHECK(fi.offset() == 0);
  CHECK(!w.flush());  // reports the failures since the previous flush, and resets

  // 3. Space comes back: the same ingestor resumes from its offset; writes succeed again.
  w.run([&](Database& db) { db.exec("PRAGMA max_page_count = 1073741823"); });
  CHECK(fi.poll() == static_cast<int64_t>(text.size()));
  std::vector<MetricRow> after = {{run, "after", 1, 1.0, 1.7e9}};
  CHECK(w.wait(w.append(std::move(after))));
  CHECK(w.flush());
  CHECK(raw_text(path, "PRAGMA integrity_check") == "ok");
  CHECK(raw_int(path, "SELECT count(*) FROM metrics WHERE name = 'tokens'") == 3000);
  CHECK(raw_int(path, "SELECT count(DISTINCT step) FROM metrics WHERE name = 'loss'") >= 3000);
  CHECK(raw_int(path, "SELECT byte_offset FROM ingest_offsets") == static_cast<long long>(text.size()));

  // 4. Database::exec reports SQLITE_FULL as kFull with advice.
  {
    Database db(path);
    db.exec("PRAGMA max_page_count = " + std::to_string(query_int(db, "PRAGMA page_count")));
    CHECK_THROWS(db.exec("CREATE TABLE filler(x); INSERT INTO filler SELECT randomblob(100000);"),
                 "free space");
  }
  std::printf("worst append latency while full: %.3f ms; dropped %llu rows\n", worst_ms,
              static_cast<unsigned long long>(st.dropped_rows));
  return flotilla_test::summary("test_diskfull_d3");
}
