// Metrics-protocol ingestion: torn lines (stream and file), duplicate steps after a resume,
// offsets across restarts (nothing lost, nothing doubled), out-of-order lines, bad lines, and the
// non-metric records (run_start, checkpoint, event, summary).
#include <string>

#include "db/errors.h"
#include "db/ingest.h"
#include "db/queries.h"
#include "db/run_records.h"
#include "db/sql.h"
#include "db/writer.h"
#include "store_fixture.h"

using namespace flotilla::db;
using namespace store_test;

namespace {

std::string step_line(int64_t step, double loss, double time = 1.7e9) {
  return "{\"v\":1,\"type\":\"step\",\"time\":" + std::to_string(time + static_cast<double>(step)) +
         ",\"rank\":0,\"step\":" + std::to_string(step) + ",\"tokens\":" + std::to_string(step * 1024) +
         ",\"loss\":" + std::to_string(loss) +
         ",\"lr\":0.001,\"tokens_per_s\":1000,\"mfu\":0.25,\"time_ms\":{\"data\":0.5,\"forward\":2},"
         "\"skipped\":false}\n";
}

int64_t count_rows(const std::string& path, int64_t run, const std::string& name) {
  return raw_int(path, "SELECT count(*) FROM metrics WHERE run_id = " + std::to_string(run) +
                           " AND name = '" + name + "'");
}

double value_at(const Database& db, int64_t run, const std::string& name, int64_t step) {
  Stmt st(db, "SELECT value FROM metrics WHERE run_id = ?1 AND name = ?2 AND step = ?3");
  st.bind(1, run).bind(2, name).bind(3, step);
  return st.step() ? st.f64(0) : -1;
}

void test_stream_chunks_torn_and_bad(const fs::path& dir) {
  const std::string path = (dir / "stream.db").string();
  Writer w(path);
  int64_t run = 0;
  w.run([&](Database& db) { run = make_run(db, "stream"); });
  Ingestor in(w, run);
  int steps_seen = 0;
  in.on_record = [&](const flotilla::MetricsRecord& e) { steps_seen += e.type == flotilla::MetricsRecordType::kStep; };
  std::string text;
  for (int s = 1; s <= 50; ++s) text += step_line(s, 5.0 - s * 0.01);
  text += "not json at all\n";
  text += "{\"v\":2,\"type\":\"step\",\"step\":99,\"loss\":1}\n";            // future protocol: skipped
  text += "{\"v\":1,\"type\":\"brand_new\",\"time\":1}\n";                   // unknown type: skipped
  text += "[1,2,3]\n";                                                       // not an object
  text += "{\"v\":1,\"type\":\"step\",\"rank\":1,\"step\":7,\"loss\":9}\n";  // rank 1 never overwrites
  text += step_line(51, 4.0).substr(0, 40);                                  // torn last line
  // Feed one byte at a time: lines split anywhere must still parse.
  for (char c : text) in.feed(std::string_view(&c, 1));
  const Ticket t = in.finish();
  CHECK(w.wait(t));
  CHECK(w.flush());
  CHECK(steps_seen == 50);
  CHECK(in.stats().bad_lines == 2);
  CHECK(in.stats().skipped == 3);
  CHECK(in.stats().torn_bytes == 40);
  CHECK(count_rows(path, run, "loss") == 50);
  CHECK(count_rows(path, run, "time_ms.forward") == 50);  // nested objects become dotted names
  CHECK(count_rows(path, run, "skipped") == 50);          // booleans as 0/1
  Database db(path);
  CHECK_NEAR(value_at(db, run, "loss", 7), 5.0 - 0.07, 1e-9);  // not rank 1's 9
  CHECK(value_at(db, run, "loss", 51) == -1);                  // the torn line was never stored
}

void test_resume_duplicates_and_out_of_order(const fs::path& dir) {
  const std::string path = (dir / "resume.db").string();
  Writer w(path);
  int64_t run = 0;
  w.run([&](Database& db) { run = make_run(db, "resume"); });
  {
    Ingestor first(w, run);
    std::string text;
    for (int s = 1; s <= 600; ++s) text += step_line(s, 10.0);
    first.feed(text);
    CHECK(w.wait(first.finish()));
  }
  {
    // The worker resumed from the checkpoint at step 500 and recomputed 501..600 (new values),
    // then went on to 700; lines arrive out of order.
    Ingestor second(w, run);
    std::string text;
    for (int s = 700; s >= 501; --s) text += step_line(s, 2.0 + s * 1e-3);
    second.feed(text);
    CHECK(w.wait(second.finish()));
  }
  CHECK(w.flush());
  CHECK(count_rows(path, run, "loss") == 700);  // replaced, never doubled
  Database db(path);
  CHECK_NEAR(value_at(db, run, "loss", 550), 2.55, 1e-9);
  CHECK_NEAR(value_at(db, run, "loss", 500), 10.0, 1e-9);
  // Block summaries follow the replacement (block 2 = steps 512..767 mixes old and new rows).
  const auto buckets = metric_series(db, run, "loss", 1000);
  CHECK(buckets.size() == 700);
  double max_after_500 = 0;
  for (const auto& b : buckets)
    if (b.first_step > 500) max_after_500 = std::max(max_after_500, b.max);
  CHECK_NEAR(max_after_500, 2.7, 1e-9);
  const auto coarse = metric_series(db, run, "loss", 2, 1, 700);
  CHECK(coarse.size() == 2);
  CHECK(!coarse.empty() && coarse.back().last_step == 700 && std::abs(coarse.back().last - 2.7) < 1e-9);
  CHECK(raw_int(path, "SELECT sum(count) FROM metric_blocks WHERE name = 'loss'") == 700);
}

void test_file_offsets_across_restarts(const fs::path& dir) {
  const std::string path = (dir / "file.db").string();
  const fs::path jsonl = dir / "metrics.jsonl";
  std::string all;
  all +=
      "{\"v\":1,\"type\":\"run_start\",\"time\":1.7e9,\"rank\":0,\"run\":\"f\",\"config\":{\"train\":{"
      "\"steps\":30}},"
      "\"world_size\":2,\"parameters\":12345,\"flops_per_token\":6.5e4,\"start_step\":0,\"resumed_from\":"
      "null}\n";
  for (int s = 1; s <= 10; ++s) all += step_line(s, 3.0);
  const std::string torn = step_line(11, 3.0);
  write_bytes(jsonl, all + torn.substr(0, 25));
  int64_t run = 0;
  {
    Writer w(path);
    w.run([&](Database& db) { run = make_run(db, "file"); });
    FileIngestor fi(w, run, jsonl.string(), "metrics.jsonl");
    CHECK(fi.poll() == static_cast<int64_t>(all.size()));  // stops before the torn line
    CHECK(fi.offset() == static_cast<int64_t>(all.size()));
    CHECK(fi.poll() == 0);  // nothing new
  }
  CHECK(raw_int(path, "SELECT byte_offset FROM ingest_offsets") == static_cast<long long>(all.size()));
  CHECK(count_rows(path, run, "loss") == 10);
  // The writer finishes the torn line and appends more; a new process resumes at the stored offset.
  std::string more = torn.substr(25);
  for (int s = 12; s <= 20; ++s) more += step_line(s, 2.0);
  more +=
      "{\"v\":1,\"type\":\"checkpoint\",\"time\":1.7e9,\"rank\":0,\"step\":20,\"dir\":\"ck/"
      "step-20\",\"bytes\":10,"
      "\"seconds\":0.1,\"reason\":\"periodic\"}\n";
  more +=
      "{\"v\":1,\"type\":\"event\",\"time\":1.7e9,\"rank\":0,\"level\":\"warning\",\"message\":\"slow disk\","
      "\"code\":\"io\"}\n";
  more +=
      "{\"v\":1,\"type\":\"summary\",\"time\":1.7e9,\"rank\":0,\"steps\":20,\"tokens\":20480,\"final_loss\":"
      "2.0,"
      "\"best_val_loss\":null,\"wall_s\":5,\"mean_tokens_per_s\":1000,\"mean_mfu\":0.2,\"exit\":"
      "\"completed\"}\n";
  {
    std::ofstream f(jsonl, std::ios::app);
    f << more;
  }
  {
    Writer w(path);
    FileIngestor fi(w, run, jsonl.string(), "metrics.jsonl");
    CHECK(fi.offset() == static_cast<int64_t>(all.size()));
    const int64_t got = fi.poll();  // the torn line's 25 bytes, then the rest
    CHECK_MSG(got == static_cast<int64_t>(more.size() + 25), "%lld of %zu bytes", static_cast<long long>(got),
              more.size());
    CHECK_MSG(fi.stats().lines == 13, "%llu lines",
              static_cast<unsigned long long>(fi.stats().lines));  // new only
  }
  CHECK(count_rows(path, run, "loss") == 20);
  CHECK(count_rows(path, run, "tokens") == 20);
  Database db(path);
  const Run r = get_run(db, run);
  CHECK(r.world_size && *r.world_size == 2);
  CHECK(r.parameters && *r.parameters == 12345);
  // Ingest records what the worker said and leaves the status alone: run_start and the summary
  // are the runs layer's to act on (runs/run_status.h; tests/runs/test_run_status.cpp).
  CHECK(r.status == RunStatus::kCreated);
  CHECK(r.summary_json.find("\"exit\":\"completed\"") != std::string::npos);
  CHECK(r.config_json.find("\"steps\":30") != std::string::npos);
  const auto cps = list_checkpoints(db, run);
  CHECK(cps.size() == 1 && cps[0].dir == "ck/step-20");
  bool warned = false;
  for (const auto& e : list_events(db, run)) warned |= e.level == "warning" && e.message == "slow disk";
  CHECK(warned);
  // A third process with nothing new reads nothing and changes nothing.
  {
    Writer w(path);
    FileIngestor fi(w, run, jsonl.string(), "metrics.jsonl");
    CHECK(fi.poll() == 0);
  }
  // Re-ingesting the whole file under another source name doubles nothing either.
  {
    Writer w(path);
    FileIngestor fi(w, run, jsonl.string(), "again");
    fi.poll();
  }
  CHECK(count_rows(path, run, "loss") == 20);
  CHECK(raw_int(path, "SELECT count(*) FROM events WHERE message = 'slow disk'") == 1);
  CHECK(raw_int(path, "SELECT count(*) FROM checkpoints") == 1);
}

}  // namespace

int main() {
  const fs::path dir = scratch("db_ingest", "all");
  test_stream_chunks_torn_and_bad(dir);
  test_resume_duplicates_and_out_of_order(dir);
  test_file_offsets_across_restarts(dir);
  return flotilla_test::summary("test_ingest");
}
