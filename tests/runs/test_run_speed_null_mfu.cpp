// Issue 33 D20, the runs side: once a step beats the MFU ceiling the worker reports no MFU (null in
// its step records and its summary's mean_mfu). The run's one speed figure (runs/run_speed.h) then
// has no MFU either, whether it comes from the summary or from the steps as they arrive, rather
// than a mean over the steps that still had one, or zeros mixed in.
#include "check.h"
#include "db/ingest.h"
#include "engine/train/metrics_reader.h"
#include "runs/run_speed.h"
#include "runs_fixture.h"
#include "worker_run.h"

using namespace runs_test;
namespace db = flotilla::db;
namespace runs = flotilla::runs;

namespace {

std::string step_line(int step, const std::string& mfu) {
  return "{\"v\":1,\"type\":\"step\",\"time\":1,\"rank\":0,\"step\":" + std::to_string(step) +
         ",\"tokens\":64,\"loss\":5.0,\"lr\":0.001,\"grad_norm\":1,\"tokens_per_s\":100,\"mfu\":" + mfu +
         "}\n";
}

// The steps as a live run's watcher reads them (the reader gives 0 for a null MFU).
runs::RunSpeed live_mean(const std::string& lines) {
  runs::SpeedMean mean;
  size_t at = 0;
  for (size_t end; (end = lines.find('\n', at)) != std::string::npos; at = end + 1) {
    flotilla::MetricsRecord r;
    if (flotilla::parse_metrics_line(lines.substr(at, end - at), r) == flotilla::ParseStatus::kRecord &&
        r.type == flotilla::MetricsRecordType::kStep)
      mean.add(r.step().step, r.step().tokens_per_s, r.step().mfu);
  }
  return mean.value();
}

}  // namespace

int main() {
  const std::string dir = scratch("speed_null_mfu");
  // The ceiling beaten from step 3 on.
  const std::string beaten =
      step_line(1, "0.5") + step_line(2, "0.9") + step_line(3, "null") + step_line(4, "null");
  CHECK_MSG(live_mean(beaten).mfu == 0, "a mean MFU over steps where it was not reported: %g",
            live_mean(beaten).mfu);
  CHECK(live_mean(beaten).tokens_per_s == 100);
  const std::string known = step_line(1, "0.5") + step_line(2, "0.4") + step_line(3, "0.2");
  CHECK(std::abs(live_mean(known).mfu - 0.3) < 1e-12);

  // A stored run whose summary says mean_mfu null: no MFU in its summary (runs show, compare).
  db::Writer writer(dir + "/store.db");
  runs::NewRunRequest req;
  req.config = config_of(tiny_config(4));
  req.name = "beaten";
  req.explicit_name = true;
  req.runs_root = dir + "/runs";
  const runs::NewRun run = runs::create_local_run(writer, req);
  flotilla_test::write_text(
      run.run_dir + "/metrics.jsonl",
      beaten +
          "{\"v\":1,\"type\":\"summary\",\"time\":2,\"rank\":0,\"steps\":4,\"tokens\":256,"
          "\"final_loss\":5,\"best_val_loss\":null,\"wall_s\":1,\"mean_tokens_per_s\":100,"
          "\"mean_mfu\":null,\"exit\":\"completed\"}\n");
  db::FileIngestor file(writer, run.run_id, run.run_dir + "/metrics.jsonl", "metrics.jsonl");
  while (file.poll() > 0) {
  }
  writer.flush();
  const db::Database d(writer.path());
  const db::RunSummary s = runs::run_summary(d, run.run_id, db::now_seconds());
  CHECK(s.tokens_per_s && *s.tokens_per_s == 100);
  CHECK_MSG(!s.mfu, "the run's MFU is shown as %g", s.mfu.value_or(-1));
  return flotilla_test::summary("test_run_speed_null_mfu");
}
