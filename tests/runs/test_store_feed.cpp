// The store read back as records (runs/store_feed.h), what the Live page draws of every run
// (issue 34 item 1): a 2-rank run's lines ingested in two commits come back as the records the
// worker wrote — run_start with its planned steps and memory baseline, every step with its
// numbers, each rank's split and each GPU's memory, the evaluation, the checkpoint, a worker
// event, a text sample and the summary — each once, in order, the second read only with what the
// second commit added, and the run's row (its status) with every read.
#include <string>

#include "check.h"
#include "db/ingest.h"
#include "db/queries.h"
#include "db/run_store.h"
#include "db/writer.h"
#include "runs/store_feed.h"
#include "runs_fixture.h"

namespace db = flotilla::db;
using flotilla::MetricsRecord;
using flotilla::MetricsRecordType;

namespace {

constexpr double kT0 = 1.7e9;

std::string run_start_line() {
  return "{\"v\":1,\"type\":\"run_start\",\"time\":" + std::to_string(kT0) +
         ",\"rank\":0,\"run\":\"feed\",\"config\":{\"train\":{\"steps\":40}},\"world_size\":2,"
         "\"parameters\":1234,\"flops_per_token\":6,\"start_step\":0,\"resumed_from\":null,\"pid\":1,"
         "\"baseline_rss_bytes\":52428800}\n";
}

std::string step_line(int step) {
  const std::string s = std::to_string(step);
  return "{\"v\":1,\"type\":\"step\",\"time\":" + std::to_string(kT0 + step) + ",\"rank\":0,\"step\":" + s +
         ",\"tokens\":" + std::to_string(step * 512) + ",\"loss\":" + std::to_string(5.0 - step * 0.05) +
         ",\"lr\":0.001,\"grad_norm\":1.5,\"tokens_per_s\":2048,\"mfu\":0.25,\"step_ms\":250,"
         "\"time_ms\":{\"data\":1,\"forward\":80,\"backward\":150,\"optimizer\":9,\"comm\":10,\"bubble\":0},"
         "\"peak_rss_bytes\":104857600,"
         "\"ranks\":[{\"rank\":0,\"data\":1,\"forward\":80,\"backward\":150,\"optimizer\":9,\"comm\":10,"
         "\"step\":250,"
         "\"bubble\":0},{\"rank\":1,\"data\":2,\"forward\":79,\"backward\":149,\"optimizer\":9,\"comm\":" +
         std::to_string(30 + step) +
         ",\"step\":250,\"bubble\":0}],\"slowest_rank\":1,"
         "\"gpus\":[{\"device\":0,\"mem_bytes\":1000,\"mem_total_bytes\":8000},{\"device\":1,\"mem_bytes\":" +
         std::to_string(2000 + step) + ",\"mem_total_bytes\":8000}]}\n";
}

template <typename T>
int count(const std::vector<MetricsRecord>& records, T type) {
  int n = 0;
  for (const MetricsRecord& r : records) n += r.type == type ? 1 : 0;
  return n;
}

}  // namespace

int main() {
  const std::string dir = runs_test::scratch("store_feed");
  const std::string path = dir + "/store.db";
  db::Writer w(path);
  int64_t run = 0;
  w.run([&](db::Database& d) {
    db::NewRun r;
    r.name = "feed";
    r.config_json = "{\"train\":{\"steps\":40}}";
    run = db::create_run(d, r);
    db::set_status(d, run, db::RunStatus::kRunning);
  });
  db::Ingestor in(w, run);
  std::string first = run_start_line();
  for (int s = 1; s <= 20; ++s) first += step_line(s);
  first += "{\"v\":1,\"type\":\"eval\",\"time\":" + std::to_string(kT0 + 20.5) +
           ",\"rank\":0,\"step\":20,\"tokens\":10240,\"val_loss\":3.75,\"batches\":4}\n";
  first += "{\"v\":1,\"type\":\"checkpoint\",\"time\":" + std::to_string(kT0 + 20.7) +
           ",\"rank\":0,\"step\":20,\"dir\":\"/ck/"
           "step-20\",\"bytes\":4096,\"seconds\":0.5,\"reason\":\"periodic\"}\n";
  first += "{\"v\":1,\"type\":\"event\",\"time\":" + std::to_string(kT0 + 20.8) +
           ",\"rank\":0,\"level\":\"warning\",\"message\":\"loss spike skipped\"}\n";
  first += "{\"v\":1,\"type\":\"sample\",\"time\":" + std::to_string(kT0 + 20.9) +
           ",\"rank\":0,\"step\":20,\"tokens\":[5,6,7],\"text\":\"hello\"}\n";
  in.feed(first);
  CHECK(w.wait(in.finish()));

  flotilla::runs::StoreFeedReader reader(run);
  const db::Database rd(path);
  flotilla::runs::StoreRead a = reader.read(rd);
  CHECK(!a.ended);
  CHECK(a.run.status == db::RunStatus::kRunning);
  CHECK(count(a.records, MetricsRecordType::kRunStart) == 1);
  CHECK(count(a.records, MetricsRecordType::kStep) == 20);
  CHECK(count(a.records, MetricsRecordType::kEval) == 1);
  CHECK(count(a.records, MetricsRecordType::kCheckpoint) == 1);
  CHECK(count(a.records, MetricsRecordType::kEvent) == 1);
  CHECK(count(a.records, MetricsRecordType::kSample) == 1);
  CHECK(count(a.records, MetricsRecordType::kSummary) == 0);
  CHECK(!a.records.empty() && a.records.front().type == MetricsRecordType::kRunStart);
  if (!a.records.empty() && a.records.front().type == MetricsRecordType::kRunStart) {
    const auto& s = a.records.front().run_start();
    CHECK(s.planned_steps == 40);
    CHECK(s.world_size == 2);
    CHECK(s.baseline_rss_bytes == 52428800u);
    CHECK(s.start_step == 0);
  }
  int64_t expect = 1;
  bool ordered = true;
  for (const MetricsRecord& r : a.records) {
    if (r.type == MetricsRecordType::kStep) {
      const auto& s = r.step();
      ordered = ordered && s.step == expect++;
      if (s.step != 7) continue;
      CHECK_NEAR(s.loss, 5.0 - 0.35, 1e-6);
      CHECK(s.tokens == 7 * 512);
      CHECK_NEAR(s.tokens_per_s, 2048, 1e-9);
      CHECK_NEAR(s.mfu, 0.25, 1e-9);
      CHECK_NEAR(s.step_ms, 250, 1e-9);
      CHECK_NEAR(s.forward_ms, 80, 1e-9);
      CHECK_NEAR(s.comm_ms, 10, 1e-9);
      CHECK(s.peak_rss_bytes == 104857600u);
      CHECK(r.slowest_rank == 1);
      CHECK(s.ranks.size() == 2);
      if (s.ranks.size() == 2) {
        CHECK_NEAR(s.ranks[1][4], 37, 1e-6);  // rank 1's comm at step 7
        CHECK_NEAR(s.ranks[0][1], 80, 1e-6);
      }
      CHECK(s.gpus.size() == 2);
      if (s.gpus.size() == 2) {
        CHECK(s.gpus[1].device == 1);
        CHECK(s.gpus[1].mem_bytes == 2007u);
        CHECK(s.gpus[1].mem_total_bytes == 8000u);
      }
    } else if (r.type == MetricsRecordType::kEval) {
      CHECK(r.eval().step == 20);
      CHECK_NEAR(r.eval().val_loss, 3.75, 1e-6);
    } else if (r.type == MetricsRecordType::kCheckpoint) {
      CHECK(r.checkpoint().dir == "/ck/step-20");
      CHECK(r.checkpoint().reason == "periodic");
    } else if (r.type == MetricsRecordType::kEvent) {
      CHECK(r.event().level == "warning");
      CHECK(r.event().message == "loss spike skipped");
    } else if (r.type == MetricsRecordType::kSample) {
      CHECK(r.sample().step == 20);
      CHECK(r.sample().text == "hello");
      CHECK(r.sample().tokens == std::vector<int32_t>({5, 6, 7}));
    }
  }
  CHECK(ordered);
  // The per-rank and per-GPU families are stored but not listed as metrics.
  for (const std::string& name : db::metric_names(rd, run))
    CHECK_MSG(name.rfind("ranks.", 0) != 0 && name.rfind("gpus.", 0) != 0, "listed: %s", name.c_str());

  // Nothing new: nothing returned.
  CHECK(reader.read(rd).records.empty());

  // The second commit: only what it added, then the end and the summary.
  std::string second;
  for (int s = 21; s <= 40; ++s) second += step_line(s);
  second +=
      "{\"v\":1,\"type\":\"summary\",\"time\":" + std::to_string(kT0 + 41) +
      ",\"rank\":0,\"steps\":40,\"tokens\":20480,\"final_loss\":3.0,\"best_val_loss\":3.75,\"wall_s\":41,"
      "\"mean_tokens_per_s\":2048,\"mean_mfu\":0.25,\"exit\":\"completed\"}\n";
  in.feed(second);
  CHECK(w.wait(in.finish()));
  w.run([&](db::Database& d) { db::set_status(d, run, db::RunStatus::kCompleted); });
  CHECK(w.flush());
  const flotilla::runs::StoreRead b = reader.read(rd);
  CHECK(b.ended);
  CHECK(b.run.status == db::RunStatus::kCompleted);
  CHECK(count(b.records, MetricsRecordType::kRunStart) == 0);
  CHECK(count(b.records, MetricsRecordType::kStep) == 20);
  CHECK(count(b.records, MetricsRecordType::kSummary) == 1);
  CHECK(!b.records.empty() && b.records.front().type == MetricsRecordType::kStep &&
        b.records.front().step().step == 21);
  CHECK(!b.records.empty() && b.records.back().type == MetricsRecordType::kSummary);
  CHECK(reader.records_read() == a.records.size() + b.records.size());
  CHECK(reader.read(rd).records.empty());
  return flotilla_test::summary("test_store_feed");
}
