// Compare page reads (see comparequery.h).
#include "ui/compare/comparequery.h"

#include <algorithm>
#include <map>
#include <set>

#include "db/costs.h"
#include "db/queue.h"
#include "runs/quality.h"
#include "runs/run_speed.h"
#include "ui/plot/smoothing.h"

namespace flotilla::ui {
namespace {

db::OpenOptions readerOptions() {
  db::OpenOptions o;
  o.create = false;
  o.quick_check = false;  // the app checked the file when it opened the workspace
  return o;
}

}  // namespace

std::vector<db::RunListItem> loadRunList(const RunListRequest& request) {
  const db::Database db(request.databasePath.toStdString(), readerOptions());
  db::RunFilter filter;
  filter.name_contains = request.nameContains.toStdString();
  return db::list_runs(db, filter);
}

std::vector<SweepGroup> loadSweepGroups(const QString& databasePath) {
  const db::Database db(databasePath.toStdString(), readerOptions());
  std::vector<SweepGroup> out;
  for (const db::Sweep& s : db::list_sweeps(db)) {
    SweepGroup g;
    g.name = s.name;
    for (const db::QueueEntry& e : db::list_queue_group(db, s.name)) {
      ++g.points;
      if (e.run_id) g.runIds.push_back(*e.run_id);
    }
    out.push_back(std::move(g));
  }
  return out;
}

namespace {

TargetHit fromReach(const runs::ReachHit& r) {
  TargetHit hit;
  hit.runId = r.run_id;
  hit.reached = r.reached;
  hit.step = r.step;
  hit.lossAtStep = r.value;
  hit.usd = r.usd;
  hit.gpuHours = r.device_hours;
  hit.runningSeconds = r.running_seconds;
  hit.trainingSeconds = r.training_seconds;
  hit.onGpus = r.on_gpus;
  return hit;
}

}  // namespace

TargetHit costToReach(const db::Database& db, const db::Run& run, double target, double smoothing) {
  const auto points = db::metric_points(db, run.id, "loss");
  std::vector<double> values;
  values.reserve(points.size());
  EmaSmoother ema(smoothing);
  for (const auto& p : points) values.push_back(smoothing > 0 ? ema.push(p.value) : p.value);
  return fromReach(runs::first_reaching(db, run, points, values, target, /*higher_is_better=*/false));
}

TargetHit costToReachScore(const db::Database& db, const db::Run& run, const std::string& metric,
                           double target) {
  return fromReach(runs::cost_to_reach_score(db, run, metric, target));
}

CompareResult loadComparison(const CompareRequest& request) {
  const db::Database db(request.databasePath.toStdString(), readerOptions());
  const double now = request.now > 0 ? request.now : db::now_seconds();
  CompareResult out;
  std::set<std::string> names;
  for (int64_t id : request.runIds) {
    out.runs.push_back(db::get_run(db, id));
    out.summaries.push_back(runs::run_summary(db, id, request.now));  // 0: as `flotilla compare` reads it
    out.comm.push_back(runs::comm_headline(runs::comm_report(db, id)));
    out.hits.push_back(costToReach(db, out.runs.back(), request.targetLoss, request.smoothing));
    for (auto& n : db::metric_names(db, id)) names.insert(std::move(n));
  }
  out.metricNames.assign(names.begin(), names.end());
  // Task scores (issue 35): the ones a target can be set on, and the cost to reach the chosen one.
  for (const auto& n : out.metricNames)
    if (runs::is_task_score_metric(n)) out.scoreMetrics.push_back(n);
  out.scoreMetric = request.scoreMetric;
  if (out.scoreMetric.empty() || !runs::is_task_score_metric(out.scoreMetric))
    out.scoreMetric = runs::is_task_score_metric(request.metric)
                          ? request.metric
                          : runs::headline_task_metric(out.scoreMetrics);
  out.scoreHigherIsBetter = runs::score_higher_is_better(out.scoreMetric);
  if (!out.scoreMetric.empty())
    for (const auto& run : out.runs)
      out.scoreHits.push_back(costToReachScore(db, run, out.scoreMetric, request.targetScore));
  if (!request.runIds.empty())
    out.series = db::aligned_series(db, request.runIds, request.metric, request.x, request.buckets, now);
  out.differences = db::config_differences(out.runs);

  // Every key, in first-seen order, with each run's value ("" where absent).
  std::vector<std::string> order;
  std::map<std::string, std::vector<std::string>> values;
  for (size_t i = 0; i < out.runs.size(); ++i) {
    for (auto& [key, value] : db::flatten_config(out.runs[i].config_json)) {
      auto [it, inserted] = values.try_emplace(key, std::vector<std::string>(out.runs.size()));
      if (inserted) order.push_back(key);
      it->second[i] = value;
    }
  }
  for (const auto& key : order) out.allConfig.push_back({key, values[key]});
  return out;
}

}  // namespace flotilla::ui
