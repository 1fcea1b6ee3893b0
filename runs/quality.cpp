// Quality beside cost (see quality.h).
#include "runs/quality.h"

#include <algorithm>
#include <cmath>
#include <regex>

#include <nlohmann/json.hpp>

#include "db/costs.h"
#include "db/metric_sink.h"
#include "engine/core/error.h"
#include "engine/eval/task.h"

namespace flotilla::runs {
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The score part of "task/<task>/<score>" (the whole name when it has no '/').
std::string score_of(const std::string& name) {
  const size_t slash = name.rfind('/');
  return slash == std::string::npos ? name : name.substr(slash + 1);
}

bool valid_task_name(const std::string& name) {
  static const std::regex re("[A-Za-z0-9._-]{1,64}");
  return std::regex_match(name, re);
}

bool valid_score_name(const std::string& name) {
  static const std::regex re("[A-Za-z0-9._]{1,64}");
  return std::regex_match(name, re);
}

}  // namespace

ReachHit first_reaching(const db::Database& db, const db::Run& run, const std::vector<db::Point>& points,
                        const std::vector<double>& values, double target, bool higher_is_better,
                        std::optional<double> first_time) {
  ReachHit hit;
  hit.run_id = run.id;
  hit.on_gpus = db::config_on_gpus(run.config_json);
  const size_t n = std::min(points.size(), values.size());
  for (size_t i = 0; i < n; ++i) {
    const double v = values[i];
    if (!std::isfinite(v) || (higher_is_better ? v < target : v > target)) continue;
    const db::Point& p = points[i];
    hit.reached = true;
    hit.step = p.step;
    hit.value = v;
    hit.training_seconds = std::max(0.0, p.time - first_time.value_or(points.front().time));
    const auto accruals = db::run_accruals(db, run.id);
    if (accruals.empty()) {
      hit.running_seconds = run.started_at ? std::max(0.0, p.time - *run.started_at) : hit.training_seconds;
      hit.device_hours = static_cast<double>(run.world_size.value_or(1)) * hit.running_seconds / 3600.0;
    } else {
      hit.running_seconds = db::running_until(accruals, p.time);
      hit.device_hours = db::accrued_until(accruals, p.time, false);
    }
    if (db::any_priced(accruals) || run.usd_per_hour.value_or(0) > 0)
      hit.usd = db::accrued_until(accruals, p.time, true);
    break;
  }
  return hit;
}

bool score_higher_is_better(const std::string& name) { return eval::higher_is_better(score_of(name)); }

bool is_task_score_metric(const std::string& metric) {
  if (metric.rfind("task/", 0) != 0) return false;
  const size_t slash = metric.rfind('/');
  if (slash <= 5 || slash + 1 >= metric.size()) return false;
  const std::string s = metric.substr(slash + 1);
  return !ends_with(s, "_stderr") && s != "n" && s != "tokens" && s != "bytes";
}

std::string headline_task_metric(const std::vector<std::string>& metrics) {
  for (const auto kind :
       {eval::TaskKind::kMultipleChoice, eval::TaskKind::kGenerate, eval::TaskKind::kPerplexity})
    for (const auto& m : metrics)
      if (is_task_score_metric(m) && score_of(m) == eval::headline_score(kind)) return m;
  for (const auto& m : metrics)
    if (is_task_score_metric(m)) return m;
  return {};
}

ReachHit cost_to_reach_score(const db::Database& db, const db::Run& run, const std::string& metric,
                             double target) {
  const std::vector<db::Point> points = db::metric_points(db, run.id, metric);
  std::vector<double> values;
  values.reserve(points.size());
  for (const auto& p : points) values.push_back(p.value);
  // Training time counts from the first training step, not from the first evaluation.
  std::optional<double> first;
  if (!points.empty()) {
    const auto whole = db::metric_series(db, run.id, "loss", 1);
    if (!whole.empty()) {
      const int64_t s = whole.front().first_step;
      const auto start = db::metric_series(db, run.id, "loss", 1, s, s);
      if (!start.empty()) first = start.front().last_time;
    }
  }
  return first_reaching(db, run, points, values, target, score_higher_is_better(metric), first);
}

std::vector<std::string> eval_worker_args(const EvalRequest& r) {
  std::vector<std::string> a{"eval", "--checkpoint", r.checkpoint, "--task", r.task};
  const auto add = [&a](const char* flag, const std::string& v) {
    if (v.empty()) return;
    a.emplace_back(flag);
    a.push_back(v);
  };
  const auto add_n = [&add](const char* flag, int v) {
    if (v > 0) add(flag, std::to_string(v));
  };
  add("--kind", r.kind);
  add("--name", r.name);
  if (!r.dev.empty() && r.fewshot > 0) {
    add("--dev", r.dev);
    add_n("--fewshot", r.fewshot);
  }
  add_n("--limit", r.limit);
  add_n("--stride", r.stride);
  add("--regex", r.regex);
  add_n("--max-tokens", r.max_tokens);
  add_n("--batch", r.batch);
  add("--tokenizer", r.tokenizer);
  a.emplace_back("--json");
  return a;
}

EvalOutcome parse_eval_json(const std::string& text) {
  // The worker prints one line; anything before it (a warning on stdout) is passed over.
  nlohmann::json j;
  size_t end = text.size();
  bool found = false;
  while (end > 0 && !found) {
    const size_t nl = text.rfind('\n', end - 1);
    const size_t begin = nl == std::string::npos ? 0 : nl + 1;
    const std::string line = text.substr(begin, end - begin);
    if (line.find('{') != std::string::npos) {
      try {
        j = nlohmann::json::parse(line);
        found = j.is_object();
      } catch (const nlohmann::json::exception&) {
      }
    }
    if (begin == 0) break;
    end = begin - 1;
  }
  if (!found) throw_data("the worker printed no JSON result line (flotilla-worker eval --json)");
  EvalOutcome o;
  const auto text_of = [&j](const char* key) {
    const auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  o.task = text_of("task");
  o.kind = text_of("kind");
  o.source = text_of("source");
  if (!valid_task_name(o.task))
    throw_data("the worker's result names no valid task (\"task\": \"" + o.task + "\")");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    if (!it->is_number()) continue;
    const double v = it->get<double>();
    if (key == "step")
      o.step = static_cast<int64_t>(v);
    else if (key == "seconds")
      o.seconds = v;
    else if (key == "examples_per_s")
      o.examples_per_s = v;
    else if (valid_score_name(key))
      o.scores.emplace_back(key, v);
  }
  if (o.scores.empty()) throw_data("the worker's result for task " + o.task + " holds no score");
  return o;
}

std::vector<std::string> store_eval(db::Database& db, int64_t run_id, int64_t step,
                                    const EvalOutcome& outcome) {
  if (step < 0) throw_data("an evaluation is stored at a checkpoint's step; this one has none");
  // The step's training time (see quality.h): the run's loss at that step, else the last before it.
  double time = db::now_seconds();
  const auto at = db::metric_series(db, run_id, "loss", 1, std::nullopt, step);
  if (!at.empty()) time = at.back().last_time;
  std::vector<db::MetricRow> rows;
  std::vector<std::string> names;
  for (const auto& [score, value] : outcome.scores) {
    names.push_back("task/" + outcome.task + "/" + score);
    rows.push_back({run_id, names.back(), step, value, time});
  }
  db::write_tx(db, [&] { db::MetricSink(db).insert(rows); });
  return names;
}

}  // namespace flotilla::runs
