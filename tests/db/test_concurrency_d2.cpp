// docs/reliability.md D2: two processes write the same database through their own Writers while this
// process reads on its own connection, holds read transactions across their commits, and writes
// too. No "database is locked" (DbError kBusy) reaches any caller, and every row arrives.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>

#include "db/errors.h"
#include "db/queries.h"
#include "db/run_store.h"
#include "db/sql.h"
#include "db/writer.h"
#include "store_fixture.h"

using namespace flotilla::db;
using namespace store_test;

namespace {

constexpr int kSteps = 12000;

[[noreturn]] void writer_process(const std::string& path, const std::string& run_name) {
  try {
    int64_t run = 0;
    Writer w(path);
    w.run([&](Database& db) { run = make_run(db, run_name); });
    for (int s = 1; s <= kSteps; s += 20) {
      std::vector<MetricRow> rows;
      for (int k = s; k < s + 20; ++k) rows.push_back({run, "loss", k, 1.0 / k, 1.7e9 + k});
      if (!w.wait(w.append(std::move(rows)))) _exit(7);  // one transaction per batch: maximal contention
      if (s % 400 == 1) {  // status and notes writes interleave with the metric batches
        w.submit([run, s](Database& db) { set_notes(db, run, "at step " + std::to_string(s)); });
      }
    }
    const bool ok = w.flush();
    const WriterStats st = w.stats();
    _exit(ok && st.failed_jobs == 0 && st.committed_rows == kSteps ? 0 : 3);
  } catch (const DbError& e) {
    std::fprintf(stderr, "writer %s: %s\n", run_name.c_str(), e.what());
    _exit(e.kind() == DbErrorKind::kBusy ? 5 : 4);
  } catch (...) {
    _exit(6);
  }
}

}  // namespace

int main() {
  const fs::path dir = scratch("db_concurrency_d2", "all");
  const std::string path = (dir / "shared.db").string();
  { Database db(path); }
  const pid_t a = ::fork();
  if (a == 0) writer_process(path, "proc-a");
  const pid_t b = ::fork();
  if (b == 0) writer_process(path, "proc-b");

  // This process: a reader connection (as the UI has) that also writes now and then.
  int busy_errors = 0, other_errors = 0, reads = 0, writes = 0;
  Database reader(path);
  const int64_t mine = make_run(reader, "reader-own");
  std::atomic<bool> done{false};
  std::thread waiter([&] {
    int status = 0;
    ::waitpid(a, &status, 0);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "process a: status %d", status);
    ::waitpid(b, &status, 0);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "process b: status %d", status);
    done = true;
  });
  while (!done) {
    try {
      // A deferred read transaction held across the writers' commits, then a write: the sqlx#853
      // trap. write_tx() is a SAVEPOINT inside it, so we end the read first, as the store's API
      // does everywhere: reads never upgrade in place.
      reader.exec("BEGIN");
      for (const auto& item : list_runs(reader)) metric_series(reader, item.run.id, "loss", 100);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      reader.exec("COMMIT");
      ++reads;
      set_notes(reader, mine, "read " + std::to_string(reads));
      set_status(reader, mine, reads % 2 ? RunStatus::kRunning : RunStatus::kPaused);
      ++writes;
    } catch (const DbError& e) {
      std::fprintf(stderr, "reader: %s\n", e.what());
      (e.kind() == DbErrorKind::kBusy ? busy_errors : other_errors)++;
      try {
        reader.exec("ROLLBACK");
      } catch (...) {
      }
    }
  }
  waiter.join();
  CHECK(busy_errors == 0);
  CHECK(other_errors == 0);
  CHECK(reads > 0 && writes > 0);
  for (const char* name : {"proc-a", "proc-b"}) {
    const Run r = get_run(reader, name);
    CHECK(query_int(reader, "SELECT count(*) FROM metrics WHERE run_id = " + std::to_string(r.id)) == kSteps);
    CHECK(r.notes == "at step " + std::to_string(kSteps - 399));
  }
  CHECK(raw_text(path, "PRAGMA integrity_check") == "ok");
  std::printf("reader: %d read transactions and %d writes while two processes wrote\n", reads, writes);
  return flotilla_test::summary("test_concurrency_d2");
}
