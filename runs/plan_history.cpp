// Earlier runs for the planner's calibration (see plan_history.h).
#include "runs/plan_history.h"

#include <algorithm>
#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "db/queries.h"
#include "engine/config/config_io.h"
#include "engine/core/error.h"

namespace flotilla::runs {
namespace {

// A run started from the built-in demo stores no TOML, only the config_json of its run_start
// record (the same tree): written back as TOML tables so the one config parser reads it.
void json_tables(const nlohmann::json& j, const std::string& prefix, std::string& out) {
  std::string values;
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!it->is_object() && !it->is_null()) values += it.key() + " = " + it->dump() + "\n";
  if (!prefix.empty() && !values.empty()) out += "[" + prefix + "]\n";
  out += values;
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it->is_object()) json_tables(*it, prefix.empty() ? it.key() : prefix + "." + it.key(), out);
}

}  // namespace

RunConfig stored_run_config(const db::Run& run) {
  if (!run.config_toml.empty()) return parse_config_toml(run.config_toml, "stored config of run " + run.name);
  const auto j = nlohmann::json::parse(run.config_json, nullptr, false);
  if (!j.is_object() || j.empty()) throw Error(ExitCode::kConfig, "run " + run.name + " stores no config");
  std::string toml;
  json_tables(j, "", toml);
  return parse_config_toml(toml, "stored config_json of run " + run.name);
}

std::vector<RunObservation> plan_history(const db::Database& db, const RunConfig* like, int limit) {
  db::RunFilter filter;
  filter.sort = db::RunFilter::Sort::kCreated;
  filter.descending = true;
  std::vector<RunObservation> out;
  for (const db::RunListItem& item : db::list_runs(db, filter)) {
    if (static_cast<int>(out.size()) >= limit) break;
    const db::Run& run = item.run;
    if (run.target != "local" || item.last_step < 2) continue;
    RunObservation o;
    try {
      o.config = stored_run_config(run);
    } catch (const std::exception&) {  // an older engine's keys, or no config at all
      continue;
    }
    if (like && !comparable_runs(*like, o.config)) continue;
    std::vector<db::Point> points = db::metric_points(db, run.id, "step_ms");
    if (points.size() < 2) continue;
    const db::Point first = points.front();
    points.erase(points.begin());  // the warm-up step
    std::vector<double> ms;
    for (const auto& p : points)
      if (std::isfinite(p.value) && p.value > 0) ms.push_back(p.value);
    if (ms.empty()) continue;
    std::sort(ms.begin(), ms.end());
    const size_t n = ms.size();
    o.step_s = (n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2])) / 1000.0;
    o.steps = static_cast<int64_t>(n);
    // Start-up: running to the first step record, less one ordinary step (a fresh start only: a
    // resumed run's first record is not its first start's).
    if (run.started_at && first.step == 1 && first.time > *run.started_at)
      o.startup_s = std::max(0.0, first.time - *run.started_at - o.step_s);
    o.name = run.name;
    o.when = run.ended_at.value_or(run.started_at.value_or(run.created_at));
    out.push_back(std::move(o));
  }
  return out;
}

Calibration store_calibration(const db::Database& db, const RunConfig& config, bool measure_if_absent) {
  Calibration cal = machine_calibration(config, measure_if_absent);
  // Every local run: plan_calibrated picks the comparable ones, and for a model never run here the
  // runs of other models in the same layout (as the wizard hands it the same history).
  cal.history = plan_history(db);
  return cal;
}

}  // namespace flotilla::runs
