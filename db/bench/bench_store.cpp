// flotilla-bench-store: the run store's performance figures, each against a baseline measured in
// the same run (STYLE.md principle 14). Usage: flotilla-bench-store [--rows N] [--big-rows N] [--dir D]
//
//  1. ingest: N metric rows through Writer::append (batches of 5,000 rows, as the Ingestor sends
//     them) vs the same rows inserted with raw prepared sqlite3 statements in 50,000-row
//     transactions into an identical fresh database. Prints rows/s of both and the ratio.
//  2. downsample: a 1M-point series to 1,000 buckets (metric_series), median of 7 queries; also the
//     same query forced through the raw-row scan, for comparison.
//  3. open: a 100-run database of --big-rows rows (default 10M; built once in --dir and reused),
//     median time to construct Database (integrity policy as shipped), and with the full quick_check.
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "db/database.h"
#include "db/metric_sink.h"
#include "db/queries.h"
#include "db/run_store.h"
#include "db/sql.h"
#include "db/writer.h"

namespace fs = std::filesystem;
using namespace flotilla::db;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

const char* const kNames[] = {"loss",
                              "lr",
                              "grad_norm",
                              "tokens",
                              "tokens_per_s",
                              "mfu",
                              "step_ms",
                              "peak_rss_bytes",
                              "time_ms.data",
                              "time_ms.forward",
                              "time_ms.backward",
                              "time_ms.optimizer",
                              "time_ms.comm",
                              "val_loss"};
constexpr int kNameCount = 14;

MetricRow row_at(int64_t run_id, int64_t i) {
  const int64_t step = i / kNameCount + 1;
  return {run_id, kNames[i % kNameCount], step,
          5.0 / (1.0 + static_cast<double>(step) * 1e-4) + 1e-3 * static_cast<double>(i % 7),
          1.7e9 + static_cast<double>(step) * 0.05};
}

int64_t fresh_run(const std::string& path, const std::string& name) {
  Database db(path);
  NewRun r;
  r.name = name;
  return create_run(db, r);
}

double raw_insert(const std::string& path, int64_t run_id, int64_t rows, int64_t first = 0) {
  Database db(path);
  Stmt ins(db,
           "INSERT INTO metrics(run_id, name, step, value, time) VALUES (?1, ?2, ?3, ?4, ?5) "
           "ON CONFLICT(run_id, name, step) DO UPDATE SET value = excluded.value, time = excluded.time");
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < rows;) {
    db.exec("BEGIN IMMEDIATE");
    for (int64_t end = std::min(rows, i + 50000); i < end; ++i) {
      const MetricRow r = row_at(run_id, first + i);
      ins.bind(1, r.run_id).bind(2, r.name).bind(3, r.step).bind(4, r.value).bind(5, r.time);
      ins.run();
      ins.reset();
    }
    db.exec("COMMIT");
  }
  return seconds_since(t0);
}

double writer_insert(const std::string& path, int64_t run_id, int64_t rows) {
  Writer w(path);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < rows;) {
    std::vector<MetricRow> batch;
    batch.reserve(5000);
    for (int64_t end = std::min(rows, i + 5000); i < end; ++i) batch.push_back(row_at(run_id, i));
    w.append(std::move(batch));
  }
  w.flush();
  const double t = seconds_since(t0);
  if (w.stats().committed_rows != static_cast<uint64_t>(rows)) std::fprintf(stderr, "writer lost rows!\n");
  return t;
}

template <typename F>
double median_ms(int n, F f) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    v.push_back(seconds_since(t0) * 1e3);
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 1000000, big_rows = 10000000;
  std::string dir = (fs::temp_directory_path() / "flotilla-bench-store").string();
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rows")) rows = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--big-rows")) big_rows = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--dir")) dir = argv[i + 1];
  }
  fs::create_directories(dir);
  std::printf("flotilla-bench-store: SQLite %s, scratch %s\n", sqlite3_libversion(), dir.c_str());

  // 1. ingest
  const std::string raw_db = dir + "/raw.db", writer_db = dir + "/writer.db";
  for (const auto& p : {raw_db, writer_db})
    for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(p + suffix);
  const double t_raw = raw_insert(raw_db, fresh_run(raw_db, "raw"), rows);
  const double t_writer = writer_insert(writer_db, fresh_run(writer_db, "writer"), rows);
  const double raw_rate = static_cast<double>(rows) / t_raw,
               writer_rate = static_cast<double>(rows) / t_writer;
  std::printf(
      "ingest     %lld rows: raw sqlite3 %.0f rows/s, writer %.0f rows/s, ratio %.2f (target >= 0.80 and >= "
      "300k rows/s)\n",
      static_cast<long long>(rows), raw_rate, writer_rate, writer_rate / raw_rate);

  // 2. downsample a 1M-point series
  const std::string series_db = dir + "/series.db";
  if (!fs::exists(series_db)) {
    Database db(series_db);
    NewRun r;
    r.name = "series";
    const int64_t id = create_run(db, r);
    MetricSink sink(db);
    for (int64_t s = 1; s <= 1000000;) {
      std::vector<MetricRow> batch;
      for (int64_t end = std::min<int64_t>(1000000, s + 49999); s <= end; ++s)
        batch.push_back(
            {id, "loss", s, 3.0 + 0.001 * static_cast<double>(s % 1000), 1.7e9 + static_cast<double>(s)});
      db.write_transaction([&] { sink.insert(batch); });
    }
  }
  {
    Database db(series_db);
    const int64_t id = get_run(db, "series").id;
    std::vector<Bucket> out;
    const double ms = median_ms(7, [&] { out = metric_series(db, id, "loss", 1000); });
    const double raw_ms =
        median_ms(3, [&] { out = metric_series(db, id, "loss", 3922); });  // < 256 steps each
    std::printf(
        "downsample 1M points -> 1000 buckets: %.2f ms (target < 50 ms); raw-row scan of the same series "
        "(3922 buckets): %.1f ms\n",
        ms, raw_ms);
  }

  // 3. open a 100-run database
  const std::string big_db = dir + "/big-" + std::to_string(big_rows) + ".db";
  if (!fs::exists(big_db)) {
    std::printf("building %s (%lld rows over 100 runs, once)...\n", big_db.c_str(),
                static_cast<long long>(big_rows));
    std::fflush(stdout);
    const auto t0 = std::chrono::steady_clock::now();
    {
      Writer w(big_db);
      std::vector<int64_t> ids;
      w.run([&](Database& db) {
        for (int i = 0; i < 100; ++i) {
          NewRun r;
          r.name = "run-" + std::to_string(i);
          ids.push_back(create_run(db, r));
        }
      });
      const int64_t per_run = big_rows / 100;
      std::vector<Ticket> tickets;
      for (int64_t run = 0; run < 100; ++run)
        for (int64_t i = 0; i < per_run;) {
          std::vector<MetricRow> batch;
          for (int64_t end = std::min(per_run, i + 5000); i < end; ++i)
            batch.push_back(row_at(ids[static_cast<size_t>(run)], i));
          tickets.push_back(w.append(std::move(batch)));
          if (tickets.size() > 100) {  // stay far below the writer's queue limit
            w.wait(tickets[tickets.size() - 100]);
          }
        }
      w.flush();
      if (w.stats().committed_rows != static_cast<uint64_t>(per_run * 100))
        std::fprintf(stderr, "rows dropped!\n");
    }
    std::printf("built in %.1f s\n", seconds_since(t0));
  }
  std::printf("database   %s: %.0f MB\n", big_db.c_str(), static_cast<double>(fs::file_size(big_db)) / 1e6);
  const double open_ms = median_ms(5, [&] { Database db(big_db); });
  OpenOptions full;
  full.full_check_max_bytes = 0;
  const double full_ms = median_ms(1, [&] { Database db(big_db, full); });
  std::printf("open       100 runs, %lld rows: %.1f ms (target < 200 ms); with a full quick_check: %.0f ms\n",
              static_cast<long long>(big_rows), open_ms, full_ms);
  return 0;
}
