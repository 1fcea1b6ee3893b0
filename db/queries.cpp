// Read queries (see queries.h; the block/raw downsampling split is explained there).
#include "db/queries.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "db/costs.h"
#include "db/metric_sink.h"
#include "db/sql.h"

namespace flotilla::db {
namespace {

struct LastPoint {
  int64_t step = 0;
  double value = 0, time = 0;
};

std::optional<LastPoint> last_point(const Database& db, int64_t run_id, const std::string& name) {
  Stmt st(db,
          "SELECT last_step, last_value, last_time FROM metric_blocks WHERE run_id = ?1 AND name = ?2 "
          "ORDER BY block DESC LIMIT 1");
  st.bind(1, run_id).bind(2, name);
  if (!st.step()) return std::nullopt;
  return LastPoint{st.i64(0), st.f64(1), st.f64(2)};
}

std::optional<LastPoint> first_point(const Database& db, int64_t run_id, const std::string& name) {
  Stmt st(db, "SELECT step, value, time FROM metrics WHERE run_id = ?1 AND name = ?2 ORDER BY step LIMIT 1");
  st.bind(1, run_id).bind(2, name);
  if (!st.step()) return std::nullopt;
  return LastPoint{st.i64(0), st.f64(1), st.f64(2)};
}

std::optional<double> min_of(const Database& db, int64_t run_id, const std::string& name) {
  Stmt st(db, "SELECT min(min_value) FROM metric_blocks WHERE run_id = ?1 AND name = ?2");
  st.bind(1, run_id).bind(2, name);
  return st.step() ? st.opt_f64(0) : std::nullopt;
}

std::optional<double> mean_of(const Database& db, int64_t run_id, const std::string& name) {
  Stmt st(db, "SELECT avg(value) FROM metrics WHERE run_id = ?1 AND name = ?2");
  st.bind(1, run_id).bind(2, name);
  return st.step() ? st.opt_f64(0) : std::nullopt;
}

void merge(Bucket& b, int64_t first, int64_t last, int64_t count, double mn, double mx, double last_value,
           double last_time) {
  if (b.count == 0) {
    b = Bucket{first, last, count, mn, mx, last_value, last_time};
    return;
  }
  b.first_step = std::min(b.first_step, first);
  b.count += count;
  b.min = std::min(b.min, mn);
  b.max = std::max(b.max, mx);
  if (last >= b.last_step) {
    b.last_step = last;
    b.last = last_value;
    b.last_time = last_time;
  }
}

void flatten(const nlohmann::json& j, const std::string& prefix,
             std::vector<std::pair<std::string, std::string>>& out) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it)
      flatten(*it, prefix.empty() ? it.key() : prefix + "." + it.key(), out);
  } else if (j.is_string()) {
    out.emplace_back(prefix, j.get<std::string>());
  } else {
    out.emplace_back(prefix, j.dump());
  }
}

}  // namespace

std::vector<RunListItem> list_runs(const Database& db, const RunFilter& f) {
  std::string sql = "SELECT name FROM runs WHERE 1";
  if (!f.statuses.empty()) {
    sql += " AND status IN (";
    for (size_t i = 0; i < f.statuses.size(); ++i)
      sql += std::string(i ? "," : "") + "'" + to_string(f.statuses[i]) + "'";
    sql += ")";
  }
  if (!f.name_contains.empty()) sql += " AND instr(name, ?1) > 0";
  if (!f.tag.empty()) sql += " AND id IN (SELECT run_id FROM run_tags WHERE tag = ?2)";
  if (f.created_after) sql += " AND created_at >= ?3";
  if (f.created_before) sql += " AND created_at < ?4";
  Stmt st(db, sql);
  if (!f.name_contains.empty()) st.bind(1, f.name_contains);
  if (!f.tag.empty()) st.bind(2, f.tag);
  if (f.created_after) st.bind(3, *f.created_after);
  if (f.created_before) st.bind(4, *f.created_before);
  std::vector<RunListItem> out;
  while (st.step()) {
    RunListItem item;
    item.run = get_run(db, st.text(0));
    if (auto lp = last_point(db, item.run.id, "loss")) {
      item.last_step = lp->step;
      item.last_loss = lp->value;
    }
    Stmt count(db, "SELECT COUNT(*) FROM checkpoints WHERE run_id = ?");  // the primary key's prefix
    count.bind(1, item.run.id);
    if (count.step()) item.checkpoints = count.i64(0);
    out.push_back(std::move(item));
  }
  using Sort = RunFilter::Sort;
  const auto less = [&](const RunListItem& a, const RunListItem& b) {
    switch (f.sort) {
      case Sort::kName:
        return a.run.name < b.run.name;
      case Sort::kStatus:
        return std::string(to_string(a.run.status)) < to_string(b.run.status);
      case Sort::kFinalLoss:
        return a.last_loss.value_or(1e300) < b.last_loss.value_or(1e300);
      case Sort::kSteps:
        return a.last_step < b.last_step;
      case Sort::kCreated:
        break;
    }
    return a.run.created_at < b.run.created_at ||
           (a.run.created_at == b.run.created_at && a.run.id < b.run.id);
  };
  std::stable_sort(out.begin(), out.end(), [&](const RunListItem& a, const RunListItem& b) {
    return f.descending ? less(b, a) : less(a, b);
  });
  if (f.limit > 0 && out.size() > static_cast<size_t>(f.limit)) out.resize(static_cast<size_t>(f.limit));
  return out;
}

std::vector<std::string> metric_names(const Database& db, int64_t run_id) {
  std::vector<std::string> out;
  Stmt st(db,
          "SELECT DISTINCT name FROM metric_blocks WHERE run_id = ?1 AND name NOT LIKE 'ranks.%' "
          "AND name NOT LIKE 'gpus.%' ORDER BY name");
  st.bind(1, run_id);
  while (st.step()) out.push_back(st.text(0));
  return out;
}

std::vector<StepValues> step_values_after(const Database& db, int64_t run_id, int64_t after_step) {
  // The highest step committed now, over the step records' names (blocks commit with their rows).
  int64_t hi = after_step;
  std::vector<std::string> names;
  {
    Stmt st(db,
            "SELECT name, MAX(last_step) FROM metric_blocks WHERE run_id = ?1 AND name <> 'val_loss' "
            "AND name NOT LIKE 'task/%' AND name NOT LIKE 'comm/%' GROUP BY name");
    st.bind(1, run_id);
    while (st.step()) {
      names.push_back(st.text(0));
      hi = std::max(hi, st.i64(1));
    }
  }
  if (hi <= after_step) return {};
  std::map<int64_t, StepValues> rows;
  Stmt st(
      db,
      "SELECT step, value, time FROM metrics WHERE run_id = ?1 AND name = ?2 AND step > ?3 AND step <= ?4 "
      "ORDER BY step");
  for (const std::string& name : names) {
    st.reset();
    st.bind(1, run_id).bind(2, name).bind(3, after_step).bind(4, hi);
    while (st.step()) {
      StepValues& row = rows[st.i64(0)];
      row.step = st.i64(0);
      row.values.emplace_back(name, st.f64(1));
      row.time = std::max(row.time, st.f64(2));
    }
  }
  std::vector<StepValues> out;
  out.reserve(rows.size());
  for (auto& [step, row] : rows) out.push_back(std::move(row));
  return out;
}

bool any_run_in(const Database& db, const std::vector<RunStatus>& statuses) {
  Stmt st(db, "SELECT 1 FROM runs WHERE status = ?1 LIMIT 1");
  for (RunStatus s : statuses) {
    st.reset();
    st.bind(1, to_string(s));
    if (st.step()) return true;
  }
  return false;
}

std::optional<double> last_metric_value(const Database& db, int64_t run_id, const std::string& name) {
  Stmt st(db, "SELECT value FROM metrics WHERE run_id = ?1 AND name = ?2 ORDER BY step DESC LIMIT 1");
  st.bind(1, run_id).bind(2, name);
  if (!st.step()) return std::nullopt;
  return st.f64(0);
}

std::vector<StepRow> step_rows(const Database& db, int64_t run_id, const std::vector<std::string>& names,
                               int64_t up_to_step) {
  std::map<int64_t, StepRow> rows;
  Stmt st(
      db,
      "SELECT step, value, time FROM metrics WHERE run_id = ?1 AND name = ?2 AND step <= ?3 ORDER BY step");
  for (size_t k = 0; k < names.size(); ++k) {
    st.reset();
    st.bind(1, run_id).bind(2, names[k]).bind(3, up_to_step);
    while (st.step()) {
      StepRow& row = rows[st.i64(0)];
      if (row.values.empty()) {
        row.step = st.i64(0);
        row.values.assign(names.size(), std::numeric_limits<double>::quiet_NaN());
      }
      row.values[k] = st.f64(1);
      row.time = std::max(row.time, st.f64(2));
    }
  }
  std::vector<StepRow> out;
  out.reserve(rows.size());
  for (auto& [step, row] : rows) out.push_back(std::move(row));
  return out;
}

std::vector<Bucket> metric_series(const Database& db, int64_t run_id, const std::string& name, int buckets,
                                  std::optional<int64_t> from, std::optional<int64_t> to) {
  if (buckets < 1) buckets = 1;
  int64_t lo = 0, hi = 0;
  {
    Stmt first(db,
               "SELECT first_step FROM metric_blocks WHERE run_id = ?1 AND name = ?2 ORDER BY block LIMIT 1");
    first.bind(1, run_id).bind(2, name);
    if (!first.step()) return {};
    lo = std::max(from.value_or(first.i64(0)), first.i64(0));
    const auto last = last_point(db, run_id, name);
    hi = std::min(to.value_or(last->step), last->step);
  }
  if (hi < lo) return {};
  const int64_t n = buckets;
  const int64_t span = hi - lo + 1;
  std::vector<Bucket> out(static_cast<size_t>(std::min<int64_t>(n, span)));
  const auto index = [&](int64_t step) {
    return static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(out.size()) - 1,
                                                 (step - lo) * static_cast<int64_t>(out.size()) / span));
  };
  Stmt raw(db,
           "SELECT step, value, time FROM metrics WHERE run_id = ?1 AND name = ?2 AND step BETWEEN ?3 AND ?4 "
           "ORDER BY step");
  const auto scan_raw = [&](int64_t a, int64_t b) {
    raw.bind(1, run_id).bind(2, name).bind(3, a).bind(4, b);
    while (raw.step()) {
      const int64_t s = raw.i64(0);
      const double v = raw.f64(1);
      merge(out[index(s)], s, s, 1, v, v, v, raw.f64(2));
    }
    raw.reset();
  };
  if (span < n * (int64_t{1} << kBlockShift)) {
    scan_raw(lo, hi);
  } else {
    Stmt blocks(
        db,
        "SELECT block, count, min_value, max_value, first_step, last_step, last_value, last_time "
        "FROM metric_blocks WHERE run_id = ?1 AND name = ?2 AND block BETWEEN ?3 AND ?4 ORDER BY block");
    blocks.bind(1, run_id).bind(2, name).bind(3, block_of(lo)).bind(4, block_of(hi));
    while (blocks.step()) {
      const int64_t first = blocks.i64(4), last = blocks.i64(5);
      if (first >= lo && last <= hi) {
        merge(out[index(first)], first, last, blocks.i64(1), blocks.f64(2), blocks.f64(3), blocks.f64(6),
              blocks.f64(7));
      } else {  // an edge block reaching outside [lo, hi]: its rows inside, one by one
        const int64_t b = blocks.i64(0);
        scan_raw(std::max(lo, b << kBlockShift), std::min(hi, ((b + 1) << kBlockShift) - 1));
      }
    }
  }
  out.erase(std::remove_if(out.begin(), out.end(), [](const Bucket& b) { return b.count == 0; }), out.end());
  return out;
}

std::vector<Point> metric_points(const Database& db, int64_t run_id, const std::string& name) {
  std::vector<Point> out;
  Stmt st(db, "SELECT step, value, time FROM metrics WHERE run_id = ?1 AND name = ?2 ORDER BY step");
  st.bind(1, run_id).bind(2, name);
  while (st.step()) out.push_back({st.i64(0), st.f64(1), st.f64(2)});
  return out;
}

std::vector<Point> metric_points_after(const Database& db, int64_t run_id, const std::string& name,
                                       int64_t after_step) {
  std::vector<Point> out;
  Stmt st(
      db,
      "SELECT step, value, time FROM metrics WHERE run_id = ?1 AND name = ?2 AND step > ?3 ORDER BY step");
  st.bind(1, run_id).bind(2, name).bind(3, after_step);
  while (st.step()) out.push_back({st.i64(0), st.f64(1), st.f64(2)});
  return out;
}

const char* to_string(XAxis x) {
  switch (x) {
    case XAxis::kStep:
      return "step";
    case XAxis::kTokens:
      return "tokens";
    case XAxis::kWallTime:
      return "wall_s";
    case XAxis::kGpuHours:
      return "gpu_hours";
    case XAxis::kDollars:
      return "usd";
  }
  return "step";
}

std::vector<AlignedSeries> aligned_series(const Database& db, const std::vector<int64_t>& run_ids,
                                          const std::string& name, XAxis x, int buckets, double now) {
  if (now <= 0) now = now_seconds();
  std::vector<AlignedSeries> out;
  Stmt tokens(db,
              "SELECT value FROM metrics WHERE run_id = ?1 AND name = 'tokens' AND step <= ?2 "
              "ORDER BY step DESC LIMIT 1");
  for (int64_t id : run_ids) {
    const Run run = get_run(db, id);
    AlignedSeries s;
    s.run_id = id;
    s.run_name = run.name;
    const std::vector<Bucket> bs = metric_series(db, id, name, buckets);
    const auto first = first_point(db, id, name);
    const double t0 = first ? first->time : 0;
    const std::vector<Accrual> accruals = run_accruals(db, id);
    for (const Bucket& b : bs) {
      AlignedPoint p{0, b.last_step, b.min, b.max, b.last};
      switch (x) {
        case XAxis::kStep:
          p.x = static_cast<double>(b.last_step);
          break;
        case XAxis::kTokens:
          tokens.bind(1, id).bind(2, b.last_step);
          p.x = tokens.step() ? tokens.f64(0) : 0;
          tokens.reset();
          break;
        case XAxis::kWallTime:
          p.x = b.last_time - t0;
          break;
        case XAxis::kGpuHours:
          p.x = accruals.empty()
                    ? static_cast<double>(run.world_size.value_or(1)) * (b.last_time - t0) / 3600.0
                    : accrued_until(accruals, std::min(b.last_time, now), false);
          break;
        case XAxis::kDollars:
          p.x = accrued_until(accruals, std::min(b.last_time, now), true);
          break;
      }
      s.points.push_back(p);
    }
    std::stable_sort(s.points.begin(), s.points.end(),
                     [](const AlignedPoint& a, const AlignedPoint& b) { return a.x < b.x; });
    out.push_back(std::move(s));
  }
  return out;
}

namespace {

// Running time from the cost intervals, else from the status times (a run with none).
double running_seconds(const Run& run, const std::vector<Accrual>& accruals, double costs_at, double now) {
  if (!accruals.empty()) return running_until(accruals, costs_at);
  if (!run.started_at) return 0;
  return std::max(0.0, run.ended_at.value_or(now) - *run.started_at);
}

}  // namespace

double run_time_running(const Database& db, const Run& run, double now) {
  return running_seconds(run, run_accruals(db, run.id), now, now > 0 ? now : now_seconds());
}

bool task_score_higher_is_better(const std::string& score) {
  return score != "bits_per_byte" && score != "perplexity" && score != "nll_per_token";
}

std::string task_headline(const std::vector<std::string>& names) {
  for (const char* h : {"acc_norm", "bits_per_byte", "exact_match"})
    if (std::find(names.begin(), names.end(), h) != names.end()) return h;
  return names.empty() ? std::string() : names.front();
}

std::string task_kind_of_headline(const std::string& headline) {
  if (headline == "acc_norm") return "multiple_choice";
  if (headline == "bits_per_byte") return "perplexity";
  if (headline == "exact_match") return "generate";
  return "";
}

std::vector<TaskBest> best_task_scores(const Database& db, int64_t run_id) {
  std::map<std::string, std::vector<std::string>> scores;  // task -> its score names
  {
    Stmt st(db,
            "SELECT DISTINCT name FROM metric_blocks WHERE run_id = ?1 AND name LIKE 'task/%' ORDER BY name");
    st.bind(1, run_id);
    while (st.step()) {
      const std::string name = st.text(0);
      const size_t slash = name.rfind('/');
      if (slash <= 5 || slash + 1 >= name.size()) continue;
      scores[name.substr(5, slash - 5)].push_back(name.substr(slash + 1));
    }
  }
  std::vector<TaskBest> out;
  for (const auto& [task, names] : scores) {
    const std::string headline = task_headline(names);
    const bool higher = task_score_higher_is_better(headline);
    Stmt st(db,
            std::string("SELECT value, step FROM metrics WHERE run_id = ?1 AND name = ?2 ORDER BY value ") +
                (higher ? "DESC" : "ASC") + ", step ASC LIMIT 1");
    st.bind(1, run_id).bind(2, "task/" + task + "/" + headline);
    if (!st.step()) continue;
    out.push_back(TaskBest{task, headline, st.f64(0), st.i64(1)});
  }
  return out;
}

RunSummary run_summary(const Database& db, int64_t run_id, double now) {
  const double costs_at = now;  // 0: the present, measured monotonically (costs.h)
  if (now <= 0) now = now_seconds();
  const Run run = get_run(db, run_id);
  RunSummary s;
  s.run_id = run_id;
  s.name = run.name;
  s.status = to_string(run.status);
  const auto last_loss = last_point(db, run_id, "loss");
  if (last_loss) {
    s.steps = last_loss->step;
    s.final_loss = last_loss->value;
  }
  s.best_loss = min_of(db, run_id, "loss");
  s.best_val_loss = min_of(db, run_id, "val_loss");
  s.best_tasks = best_task_scores(db, run_id);
  if (auto t = last_point(db, run_id, "tokens")) s.tokens = t->value;
  s.tokens_per_s = mean_of(db, run_id, "tokens_per_s");
  s.mfu = mean_of(db, run_id, "mfu");
  const auto first = first_point(db, run_id, "loss");
  const std::vector<Accrual> accruals = run_accruals(db, run_id);
  s.running_s = running_seconds(run, accruals, costs_at, now);
  // Record times of one worker differ by true durations (engine/core/clock.h), but records of two
  // workers straddle any wall-clock step: where they disagree with the running time (monotonic,
  // the cost intervals) that wins. Never negative.
  s.training_s = first && last_loss ? last_loss->time - first->time : s.running_s;
  if (s.training_s < 0) s.training_s = s.running_s;
  s.training_s = std::max(0.0, s.training_s);
  s.gpu_hours = accruals.empty() ? static_cast<double>(run.world_size.value_or(1)) * s.running_s / 3600.0
                                 : accrued_until(accruals, costs_at, false);
  s.on_gpus = config_on_gpus(run.config_json);
  if (any_priced(accruals) || run.usd_per_hour.value_or(0) > 0) {
    s.cost_usd = accrued_until(accruals, costs_at, true);
    if (s.tokens > 0) s.usd_per_million_tokens = *s.cost_usd / s.tokens * 1e6;
  }
  return s;
}

std::vector<std::pair<std::string, std::string>> flatten_config(const std::string& config_json) {
  std::vector<std::pair<std::string, std::string>> out;
  const nlohmann::json j = nlohmann::json::parse(config_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return out;
  flatten(j, "", out);
  return out;
}

std::vector<ConfigDifference> config_differences(const std::vector<Run>& runs) {
  std::vector<std::map<std::string, std::string>> flat;
  std::set<std::string> keys;
  for (const Run& r : runs) {
    std::map<std::string, std::string> m;
    for (auto& [k, v] : flatten_config(r.config_json)) {
      keys.insert(k);
      m[k] = v;
    }
    flat.push_back(std::move(m));
  }
  std::vector<ConfigDifference> out;
  for (const std::string& k : keys) {
    ConfigDifference d{k, {}};
    for (const auto& m : flat) {
      const auto it = m.find(k);
      d.values.push_back(it == m.end() ? "" : it->second);
    }
    if (std::adjacent_find(d.values.begin(), d.values.end(), std::not_equal_to<>()) != d.values.end())
      out.push_back(std::move(d));
  }
  return out;
}

}  // namespace flotilla::db
