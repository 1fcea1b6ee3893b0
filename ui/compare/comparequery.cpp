// Compare page reads (see comparequery.h).
#include "ui/compare/comparequery.h"

#include <algorithm>
#include <map>
#include <set>

#include "db/costs.h"
#include "db/queue.h"
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

TargetHit costToReach(const db::Database& db, const db::Run& run, double target, double smoothing) {
  TargetHit hit;
  hit.runId = run.id;
  hit.onGpus = db::config_on_gpus(run.config_json);
  const auto points = db::metric_points(db, run.id, "loss");
  if (points.empty()) return hit;
  EmaSmoother ema(smoothing);
  for (const auto& p : points) {
    const double v = smoothing > 0 ? ema.push(p.value) : p.value;
    if (v <= target) {
      hit.reached = true;
      hit.step = p.step;
      hit.lossAtStep = v;
      hit.trainingSeconds = p.time - points.front().time;
      const auto accruals = db::run_accruals(db, run.id);
      if (accruals.empty()) {
        hit.runningSeconds = run.started_at ? std::max(0.0, p.time - *run.started_at) : hit.trainingSeconds;
        hit.gpuHours = static_cast<double>(run.world_size.value_or(1)) * hit.runningSeconds / 3600.0;
      } else {
        hit.runningSeconds = db::running_until(accruals, p.time);
        hit.gpuHours = db::accrued_until(accruals, p.time, false);
      }
      if (db::any_priced(accruals) || run.usd_per_hour.value_or(0) > 0)
        hit.usd = db::accrued_until(accruals, p.time, true);
      break;
    }
  }
  return hit;
}

CompareResult loadComparison(const CompareRequest& request) {
  const db::Database db(request.databasePath.toStdString(), readerOptions());
  const double now = request.now > 0 ? request.now : db::now_seconds();
  CompareResult out;
  std::set<std::string> names;
  for (int64_t id : request.runIds) {
    out.runs.push_back(db::get_run(db, id));
    out.summaries.push_back(runs::run_summary(db, id, request.now));  // 0: as `flotilla compare` reads it
    out.hits.push_back(costToReach(db, out.runs.back(), request.targetLoss, request.smoothing));
    for (auto& n : db::metric_names(db, id)) names.insert(std::move(n));
  }
  out.metricNames.assign(names.begin(), names.end());
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
