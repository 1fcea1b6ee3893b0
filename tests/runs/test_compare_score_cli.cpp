// `flotilla compare A B --target-score METRIC=V` (issue 35): the cost to reach a task score in the
// command line, the same numbers the Compare page shows (runs/quality.h). A real store: "fast" on a
// $8/h node reaches acc_norm 0.4 at step 40 (80 s: $0.1778), "thrifty" on a $2/h node at step 60
// (120 s: $0.0667); bits per byte is reached downward; a bad METRIC=V is refused (exit 2).
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "check.h"
#include "db/costs.h"
#include "db/database.h"
#include "db/metric_sink.h"
#include "db/run_store.h"
#include "runs/quality.h"
#include "worker_run.h"

using namespace flotilla;
using namespace flotilla_test;

namespace {

std::string g_root;
int g_calls = 0;

ProcResult cli(const std::vector<std::string>& args, std::string* out = nullptr) {
  const std::string log = g_root + "/cli" + std::to_string(++g_calls);
  std::vector<std::string> argv = {"/bin/sh",         "-c",   "exec \"$@\" 2>\"$0/err\"", g_root,
                                   FLOTILLA_CLI_PATH, "--db", g_root + "/store.db"};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcResult r;
  r.exit_code = wait_exit(spawn(argv, {"DISPLAY=", "WAYLAND_DISPLAY=", "QT_QPA_PLATFORM="}, log));
  if (out) *out = read_file(log);
  r.output = read_file(log) + read_file(g_root + "/err");
  return r;
}

int64_t make_run(db::Database& d, const std::string& name, double usd_per_hour, double t0,
                 const double acc[5]) {
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
  for (int s = 1; s <= 100; ++s) rows.push_back({id, "loss", s, 5.0 - s * 0.01, t0 + s * 2.0});
  db::write_tx(d, [&] { db::MetricSink(d).insert(rows); });
  db::set_status(d, id, db::RunStatus::kCompleted, t0 + 200);
  for (int i = 0; i < 5; ++i) {
    runs::EvalOutcome o;
    o.task = "arc-mini";
    o.kind = "multiple_choice";
    o.scores = {{"acc_norm", acc[i]}, {"acc_norm_stderr", 0.03}, {"n", 200}};
    runs::store_eval(d, id, 20 * (i + 1), o);
    runs::EvalOutcome w;
    w.task = "wiki";
    w.scores = {{"bits_per_byte", 2.0 - acc[i]}};
    runs::store_eval(d, id, 20 * (i + 1), w);
  }
  return id;
}

}  // namespace

int main() {
  g_root = fresh_dir("compare_score_cli");
  {
    db::Database d(g_root + "/store.db");
    db::ensure_pricing_seeded(d);
    const double t0 = db::now_seconds() - 86400;
    const double fast[] = {0.30, 0.41, 0.45, 0.50, 0.52};
    const double thrifty[] = {0.25, 0.33, 0.40, 0.44, 0.47};
    make_run(d, "fast", 8.0, t0, fast);
    make_run(d, "thrifty", 2.0, t0 + 1000, thrifty);
  }
  std::string out;
  ProcResult r =
      cli({"compare", "fast", "thrifty", "--target-score", "task/arc-mini/acc_norm=0.4", "--json"}, &out);
  CHECK_MSG(r.exit_code == 0, "%s", r.output.c_str());
  try {
    const auto j = nlohmann::json::parse(out);
    CHECK(j["target_score"]["metric"] == "task/arc-mini/acc_norm");
    CHECK(j["target_score"]["higher_is_better"] == true);
    const auto& f = j["runs"][0];
    const auto& t = j["runs"][1];
    CHECK(f["name"] == "fast" && t["name"] == "thrifty");
    CHECK(f["score_reached_step"] == 40 && t["score_reached_step"] == 60);
    CHECK_NEAR(f["score_there"].get<double>(), 0.41, 1e-12);
    CHECK_NEAR(f["score_cost_usd"].get<double>(), 80 * 8.0 / 3600, 1e-6);
    CHECK_NEAR(t["score_cost_usd"].get<double>(), 120 * 2.0 / 3600, 1e-6);
    CHECK_NEAR(t["score_running_s"].get<double>(), 120, 1e-6);
  } catch (const std::exception& e) {
    CHECK_MSG(false, "%s in %s", e.what(), out.c_str());
  }
  // The text table: the same figures as the app writes them; unreached is "-".
  r = cli({"compare", "fast", "thrifty", "--target-score", "task/arc-mini/acc_norm=0.5"}, &out);
  CHECK_MSG(r.exit_code == 0, "%s", r.output.c_str());
  CHECK_MSG(out.find("score_cost_usd") != std::string::npos && out.find("$0.1778") == std::string::npos &&
                out.find("$0.4444") != std::string::npos,
            "%s", out.c_str());  // fast reaches 0.5 at step 100 (200 s at $8/h); thrifty never
  // Downward: bits per byte 1.6 or less (acc_norm 0.4 or more).
  r = cli({"compare", "fast", "thrifty", "--target-score", "task/wiki/bits_per_byte=1.6", "--json"}, &out);
  CHECK_MSG(r.exit_code == 0, "%s", r.output.c_str());
  CHECK_MSG(out.find("\"score_reached_step\":60") != std::string::npos ||
                out.find("\"score_reached_step\": 60") != std::string::npos,
            "%s", out.c_str());
  // Refused: not a task score, no value.
  CHECK(cli({"compare", "fast", "thrifty", "--target-score", "loss=2"}).exit_code == 2);
  r = cli({"compare", "fast", "thrifty", "--target-score", "task/arc-mini/acc_norm"});
  CHECK_MSG(r.exit_code == 2 && r.output.find("METRIC=VALUE") != std::string::npos, "%s", r.output.c_str());
  return summary("test_compare_score_cli");
}
