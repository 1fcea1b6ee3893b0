// Evaluation task scores in the run store (eval.tasks): a worker's task records ingested into a real
// SQLite file become metrics task/<task>/<score> at their steps (n included), listed with the run's
// metrics for Compare; they never turn into step rows of their own (no phantom steps for Live); the
// run summary carries each task's best headline score (acc_norm highest, bits_per_byte lowest) and
// the step it was reached at; and the store feed gives them back as task records, each once, the
// second read only with what the second commit added.
#include <algorithm>
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

std::string step_line(int step) {
  return "{\"v\":1,\"type\":\"step\",\"time\":" + std::to_string(kT0 + step) +
         ",\"rank\":0,\"step\":" + std::to_string(step) + ",\"tokens\":" + std::to_string(step * 512) +
         ",\"loss\":" + std::to_string(5.0 - step * 0.05) + ",\"lr\":0.001}\n";
}

std::string mc_line(int step, double acc, double acc_norm) {
  return "{\"v\":1,\"type\":\"task\",\"time\":" + std::to_string(kT0 + step + 0.5) +
         ",\"rank\":0,\"step\":" + std::to_string(step) + ",\"tokens\":" + std::to_string(step * 512) +
         ",\"task\":\"arc-mini\",\"kind\":\"multiple_choice\",\"scores\":{\"acc\":" + std::to_string(acc) +
         ",\"acc_norm\":" + std::to_string(acc_norm) +
         ",\"acc_norm_stderr\":0.1,\"acc_stderr\":0.1,\"n\":20},\"seconds\":1.5}\n";
}

std::string ppl_line(int step, double bpb) {
  return "{\"v\":1,\"type\":\"task\",\"time\":" + std::to_string(kT0 + step + 0.6) +
         ",\"rank\":0,\"step\":" + std::to_string(step) +
         ",\"tokens\":0,\"task\":\"wiki\",\"kind\":\"perplexity\",\"scores\":{\"bits_per_byte\":" +
         std::to_string(bpb) + ",\"perplexity\":40.5,\"n\":6},\"seconds\":0.5}\n";
}

std::vector<MetricsRecord> tasks_of(const std::vector<MetricsRecord>& records) {
  std::vector<MetricsRecord> out;
  for (const MetricsRecord& r : records)
    if (r.type == MetricsRecordType::kTask) out.push_back(r);
  return out;
}

double score(const MetricsRecord& r, const std::string& name) {
  for (const auto& [n, v] : r.task().scores)
    if (n == name) return v;
  return -1;
}

}  // namespace

int main() {
  const std::string dir = runs_test::scratch("task_scores_store");
  const std::string path = dir + "/store.db";
  db::Writer w(path);
  int64_t run = 0;
  w.run([&](db::Database& d) {
    db::NewRun r;
    r.name = "tasks";
    r.config_json = "{\"train\":{\"steps\":30}}";
    run = db::create_run(d, r);
    db::set_status(d, run, db::RunStatus::kRunning);
  });
  db::Ingestor in(w, run);
  std::string first;
  for (int s = 1; s <= 20; ++s) first += step_line(s);
  first += mc_line(10, 0.30, 0.40) + ppl_line(10, 2.5);
  first += mc_line(20, 0.35, 0.35) + ppl_line(20, 2.25);
  in.feed(first);
  CHECK(w.wait(in.finish()));

  const db::Database rd(path);
  // Each score at its step, n included; listed with the run's metrics.
  const auto points = db::metric_points(rd, run, "task/arc-mini/acc_norm");
  CHECK(points.size() == 2 && points.at(0).step == 10 && points.at(1).step == 20);
  CHECK_NEAR(points.at(0).value, 0.40, 1e-12);
  CHECK(db::metric_points(rd, run, "task/arc-mini/n").size() == 2);
  CHECK(db::metric_points(rd, run, "task/wiki/bits_per_byte").size() == 2);
  const auto names = db::metric_names(rd, run);
  CHECK(std::find(names.begin(), names.end(), "task/arc-mini/acc") != names.end());
  CHECK(std::find(names.begin(), names.end(), "task/wiki/perplexity") != names.end());
  // The step rows are the step records' only.
  const auto rows = db::step_values_after(rd, run, 0);
  CHECK(rows.size() == 20);
  for (const auto& row : rows)
    for (const auto& [name, value] : row.values)
      CHECK_MSG(name.rfind("task/", 0) != 0, "step %lld has %s", static_cast<long long>(row.step),
                name.c_str());

  // The summary: acc_norm at its highest (step 10), bits_per_byte at its lowest (step 20).
  const db::RunSummary sum = db::run_summary(rd, run);
  CHECK(sum.best_tasks.size() == 2);
  if (sum.best_tasks.size() == 2) {
    CHECK(sum.best_tasks[0].metric() == "task/arc-mini/acc_norm" && sum.best_tasks[0].step == 10);
    CHECK_NEAR(sum.best_tasks[0].value, 0.40, 1e-12);
    CHECK(sum.best_tasks[1].metric() == "task/wiki/bits_per_byte" && sum.best_tasks[1].step == 20);
    CHECK_NEAR(sum.best_tasks[1].value, 2.25, 1e-12);
  }

  // The feed: one task record per task and step, its scores and kind back.
  flotilla::runs::StoreFeedReader reader(run);
  const auto a = tasks_of(reader.read(rd).records);
  CHECK(a.size() == 4);
  if (a.size() == 4) {
    CHECK(a[0].task().task == "arc-mini" && a[0].task().step == 10 && a[0].task().kind == "multiple_choice");
    CHECK(a[0].task().scores.size() == 5 && score(a[0], "acc_norm") == 0.40 && score(a[0], "n") == 20);
    CHECK(a[1].task().task == "wiki" && a[1].task().step == 10 && a[1].task().kind == "perplexity");
    CHECK(score(a[1], "bits_per_byte") == 2.5);
    CHECK(a[3].task().step == 20 && score(a[3], "bits_per_byte") == 2.25);
  }
  CHECK(tasks_of(reader.read(rd).records).empty());

  std::string second;
  for (int s = 21; s <= 30; ++s) second += step_line(s);
  second += mc_line(30, 0.45, 0.50);
  in.feed(second);
  CHECK(w.wait(in.finish()));
  const auto b = tasks_of(reader.read(rd).records);
  CHECK(b.size() == 1 && b.at(0).task().step == 30 && score(b.at(0), "acc_norm") == 0.50);
  CHECK(db::run_summary(rd, run).best_tasks.at(0).step == 30);
  return flotilla_test::summary("test_task_scores_store");
}
