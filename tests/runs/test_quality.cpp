// Quality beside cost (runs/quality.h) on a real SQLite store: two priced runs train 100 steps (2 s
// a step); "fast" on a $8/h node, "thrifty" on a $2/h node. Each is evaluated every 20 steps, the
// worker's --json lines parsed and stored as task metrics after the fact (runs::store_eval, the path
// "Evaluate…" and `flotilla runs eval` take). fast reaches acc_norm 0.4 at step 40, thrifty at step
// 60: fewer steps for fast, fewer dollars for thrifty, measured at the steps' TRAINING times (an
// evaluation stored a day later must not look a day's spend dearer). bits_per_byte is reached
// downward; an unreached target says so; stderr and counts are no targets; bad --json lines are
// refused with a reason; the worker's command line is what `eval` takes.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "check.h"
#include "db/costs.h"
#include "db/database.h"
#include "db/metric_sink.h"
#include "db/queries.h"
#include "db/run_store.h"
#include "runs/quality.h"
#include "worker_run.h"

using namespace flotilla;
using namespace flotilla_test;

namespace {

constexpr double kStep = 2.0;  // seconds a step

// A run on a node of `usd_per_hour` (1 GPU), loss every step from t0, completed after step 100.
int64_t make_run(db::Database& d, const std::string& name, double usd_per_hour, double t0) {
  const int64_t node = db::ensure_node(d, name + "-box", "ssh", "H100", 1);
  db::set_node_pricing(d, node, db::NodePricing{{}, false, usd_per_hour, {}, {}});
  db::NewRun nr;
  nr.name = name;
  nr.config_json = R"({"run":{"device":"cuda"}})";
  nr.created_at = t0 - 10;
  const int64_t id = db::create_run(d, nr);
  db::attach_node(d, id, node, 1);
  db::set_status(d, id, db::RunStatus::kRunning, t0);
  std::vector<db::MetricRow> rows;
  for (int s = 1; s <= 100; ++s) rows.push_back({id, "loss", s, 5.0 - s * 0.01, t0 + s * kStep});
  db::write_tx(d, [&] { db::MetricSink(d).insert(rows); });
  db::set_status(d, id, db::RunStatus::kCompleted, t0 + 100 * kStep);
  return id;
}

// The worker's --json line for a multiple-choice evaluation at `step`.
std::string mc_line(int64_t step, double acc_norm) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"acc\":%.4f,\"acc_norm\":%.4f,\"acc_stderr\":0.03,\"acc_norm_stderr\":0.031,\"n\":200,"
                "\"task\":\"arc-mini\",\"kind\":\"multiple_choice\",\"seconds\":1.5,\"examples_per_s\":133.3,"
                "\"source\":\"/runs/x/checkpoints/step-%lld\",\"step\":%lld}",
                acc_norm - 0.02, acc_norm, static_cast<long long>(step), static_cast<long long>(step));
  return buf;
}

}  // namespace

int main() {
  const std::string root = fresh_dir("quality");
  db::Database d(root + "/store.db");
  db::ensure_pricing_seeded(d);
  const double t0 = db::now_seconds() - 86400;  // trained yesterday, evaluated now
  const int64_t fast = make_run(d, "fast", 8.0, t0);
  const int64_t thrifty = make_run(d, "thrifty", 2.0, t0 + 1000);
  const double fast_acc[] = {0.30, 0.41, 0.45, 0.50, 0.52};
  const double thrifty_acc[] = {0.25, 0.33, 0.40, 0.44, 0.47};
  for (int i = 0; i < 5; ++i) {
    const int64_t step = 20 * (i + 1);
    // A progress line before the result, as a worker may print: the last JSON object wins.
    const auto a = runs::parse_eval_json("loading...\n" + mc_line(step, fast_acc[i]) + "\n");
    CHECK(a.task == "arc-mini" && a.kind == "multiple_choice" && a.step == step);
    CHECK_NEAR(a.examples_per_s, 133.3, 1e-9);
    CHECK(a.scores.size() == 5);  // acc, acc_norm, acc_stderr, acc_norm_stderr, n
    const auto names = runs::store_eval(d, fast, step, a);
    CHECK(names.size() == 5 && names[1] == "task/arc-mini/acc_norm" && names[4] == "task/arc-mini/n");
    runs::store_eval(d, thrifty, step, runs::parse_eval_json(mc_line(step, thrifty_acc[i])));
    // A perplexity task on thrifty: bits per byte falls.
    runs::store_eval(d, thrifty, step,
                     runs::parse_eval_json("{\"task\":\"wiki\",\"kind\":\"perplexity\",\"perplexity\":9,"
                                           "\"bits_per_byte\":" +
                                           std::to_string(1.6 - 0.1 * i) +
                                           ",\"n\":12,\"step\":" + std::to_string(step) + "}"));
  }

  // Stored at the step, with the step's training time (not now).
  const auto pts = db::metric_points(d, fast, "task/arc-mini/acc_norm");
  CHECK(pts.size() == 5 && pts[1].step == 40);
  CHECK_NEAR(pts[1].value, 0.41, 1e-12);
  CHECK_NEAR(pts[1].time, t0 + 40 * kStep, 1e-6);
  CHECK_NEAR(db::metric_points(d, fast, "task/arc-mini/n")[0].value, 200, 0);
  const auto names = db::metric_names(d, thrifty);
  CHECK(std::find(names.begin(), names.end(), "task/wiki/bits_per_byte") != names.end());

  // Cost to reach acc_norm 0.4: fast at step 40 (80 s at $8/h), thrifty at step 60 (120 s at $2/h).
  const db::Run rf = db::get_run(d, fast), rt = db::get_run(d, thrifty);
  const auto hf = runs::cost_to_reach_score(d, rf, "task/arc-mini/acc_norm", 0.4);
  const auto ht = runs::cost_to_reach_score(d, rt, "task/arc-mini/acc_norm", 0.4);
  CHECK(hf.reached && hf.step == 40 && ht.reached && ht.step == 60);
  CHECK_NEAR(hf.value, 0.41, 1e-12);
  CHECK(hf.usd && ht.usd);
  CHECK_NEAR(hf.usd.value_or(0), 80 * 8.0 / 3600, 1e-6);
  CHECK_NEAR(ht.usd.value_or(0), 120 * 2.0 / 3600, 1e-6);
  CHECK(ht.usd.value_or(1) < hf.usd.value_or(0));  // thrifty is cheaper to reach the score
  CHECK_NEAR(hf.running_seconds, 80, 1e-6);
  CHECK_NEAR(hf.device_hours, 80.0 / 3600, 1e-9);
  CHECK_NEAR(hf.training_seconds, 78, 1e-6);  // from the first training step (step 1), not step 20
  CHECK(hf.on_gpus);
  // Unreached, and lower-is-better: bits per byte 1.6, 1.5, 1.4, 1.3, 1.2 reaches 1.35 at step 80.
  CHECK(!runs::cost_to_reach_score(d, rf, "task/arc-mini/acc_norm", 0.9).reached);
  const auto bpb = runs::cost_to_reach_score(d, rt, "task/wiki/bits_per_byte", 1.35);
  CHECK(bpb.reached && bpb.step == 80);
  CHECK(!runs::cost_to_reach_score(d, rf, "task/wiki/bits_per_byte", 1.35).reached);  // fast has none

  // Which metrics a target can be set on, which way, and the headline one.
  CHECK(runs::is_task_score_metric("task/arc-mini/acc_norm"));
  CHECK(!runs::is_task_score_metric("task/arc-mini/acc_norm_stderr"));
  CHECK(!runs::is_task_score_metric("task/arc-mini/n"));
  CHECK(!runs::is_task_score_metric("loss"));
  CHECK(runs::score_higher_is_better("task/gsm/exact_match"));
  CHECK(!runs::score_higher_is_better("task/wiki/bits_per_byte"));
  CHECK(runs::headline_task_metric(names) == "task/arc-mini/acc_norm");
  CHECK(runs::headline_task_metric({"loss", "task/wiki/n", "task/wiki/bits_per_byte"}) ==
        "task/wiki/bits_per_byte");
  CHECK(runs::headline_task_metric({"loss"}).empty());

  // Bad worker output is refused with a reason; nothing half-parsed gets stored.
  CHECK_THROWS(runs::parse_eval_json(""), "no JSON result line");
  CHECK_THROWS(runs::parse_eval_json("{\"acc\":0.5}"), "no valid task");
  CHECK_THROWS(runs::parse_eval_json("{\"task\":\"a/b\",\"acc\":0.5}"), "no valid task");
  CHECK_THROWS(runs::parse_eval_json("{\"task\":\"t\",\"kind\":\"multiple_choice\",\"step\":3}"),
               "holds no score");
  CHECK_THROWS(runs::store_eval(d, fast, -1, runs::parse_eval_json(mc_line(-1, 0.5))), "checkpoint's step");

  // The worker's command line.
  runs::EvalRequest req;
  req.checkpoint = "/r/checkpoints/step-40";
  req.task = "/t/arc.jsonl";
  req.kind = "multiple_choice";
  req.dev = "/t/dev.jsonl";
  req.fewshot = 3;
  req.limit = 50;
  const auto args = runs::eval_worker_args(req);
  const std::vector<std::string> want{"eval",
                                      "--checkpoint",
                                      "/r/checkpoints/step-40",
                                      "--task",
                                      "/t/arc.jsonl",
                                      "--kind",
                                      "multiple_choice",
                                      "--dev",
                                      "/t/dev.jsonl",
                                      "--fewshot",
                                      "3",
                                      "--limit",
                                      "50",
                                      "--json"};
  CHECK(args == want);
  req.fewshot = 0;  // a dev file without few-shot examples is not passed
  CHECK(runs::eval_worker_args(req).size() == want.size() - 4);
  return summary("test_quality");
}
