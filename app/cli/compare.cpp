// `flotilla compare RUN RUN... [--group SWEEP] [--target-score METRIC=V] [--csv|--json]`: run
// summaries side by side and the config keys whose values differ; --group adds every started run of
// a sweep (its queue group); --target-score adds the cost to reach a task score (runs/quality.h, the
// numbers the app's Compare page shows).
#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "app/cli/cli.h"
#include "db/costs.h"
#include "db/errors.h"
#include "db/queries.h"
#include "db/queue.h"
#include "db/run_store.h"
#include "runs/comm_efficiency.h"
#include "runs/figures.h"
#include "runs/quality.h"
#include "runs/run_speed.h"

namespace flotilla::cli {
namespace {

using nlohmann::json;

std::string opt_text(const std::optional<double>& v, const char* fmt = "%.4f") {
  if (!v) return "";
  char buf[48];
  std::snprintf(buf, sizeof buf, fmt, *v);
  return buf;
}

json opt_json(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

// One measure of every run: its row label (also its JSON key), its text, and its JSON value (a
// number, or null where there is none: an unpriced run's dollars are null, never 0).
struct Row {
  std::string label;
  std::vector<std::string> cells;
  std::vector<json> values;
};

}  // namespace

int cmd_compare(const Context& ctx) {
  ArgReader args(ctx.args, "compare");
  if (args.flag("--help")) {
    std::printf(
        "Usage: flotilla compare RUN RUN... [--group SWEEP] [--target-score METRIC=VALUE] [--csv|--json]\n\n"
        "Final and best loss, tokens, tokens/s, MFU, running time (what the price is charged for), training\n"
        "time (first to last step), device-hours (running time x devices: GPU-h or CPU-h), cost and cost per\n"
        "million tokens (\"unpriced\", null in JSON, for a run with no price), the data-parallel group's\n"
        "share of the link it crosses and the share of communication hidden behind compute (multi-rank\n"
        "runs: flotilla runs show RUN has the whole table) of each run, then the config\n"
        "keys whose values differ. --group SWEEP compares the runs the sweep's points started (flotilla\n"
        "sweep show SWEEP), in point order, with any RUN given. --target-score task/arc/acc_norm=0.4 adds the\n"
        "first evaluated step that reached the score (at or above it; at or below for bits_per_byte) and the\n"
        "cost, device-hours and running time spent by then.\n");
    return kExitOk;
  }
  const bool csv = args.flag("--csv");
  const bool as_json = args.flag("--json");
  const std::optional<std::string> group = args.value("--group");
  const std::optional<std::string> target_score = args.value("--target-score");
  std::string score_metric;
  double score_target = 0;
  if (target_score) {
    const size_t eq = target_score->rfind('=');
    char* end = nullptr;
    if (eq != std::string::npos) score_target = std::strtod(target_score->c_str() + eq + 1, &end);
    if (eq == std::string::npos || eq + 1 >= target_score->size() || !end || *end != '\0' ||
        !runs::is_task_score_metric(target_score->substr(0, eq)))
      throw UsageError("--target-score takes METRIC=VALUE with a task score (task/<task>/<score>=0.4), not '" +
                       *target_score + "'");
    score_metric = target_score->substr(0, eq);
  }
  const auto pos = args.positionals();
  if (!group && pos.size() < 2) throw UsageError("compare needs at least two runs, or --group SWEEP");
  const db::Database db = open_store(ctx);
  std::vector<db::Run> runs;
  std::vector<db::RunSummary> sums;
  for (const auto& p : pos) {
    runs.push_back(db::get_run(db, p));
    sums.push_back(runs::run_summary(db, runs.back().id));
  }
  if (group) {
    const auto entries = db::list_queue_group(db, *group);
    if (entries.empty() && !db::find_sweep(db, *group))
      throw db::DbError(db::DbErrorKind::kNotFound, "no sweep named '" + *group + "' (flotilla sweep list)");
    size_t started = 0;
    for (const db::QueueEntry& e : entries) {
      if (!e.run_id) continue;
      ++started;
      bool listed = false;
      for (const auto& r : runs) listed = listed || r.id == *e.run_id;
      if (listed) continue;
      runs.push_back(db::get_run(db, *e.run_id));
      sums.push_back(runs::run_summary(db, runs.back().id));
    }
    if (started == 0)
      throw db::DbError(db::DbErrorKind::kNotFound, "sweep '" + *group + "' has no started run yet (" +
                                                        std::to_string(entries.size()) +
                                                        " queued): flotilla sweep show " + *group);
  }
  const auto diffs = db::config_differences(runs);

  // One table: rows are measures, columns are runs. Figures are written as the app writes them
  // (runs/figures.h): money "$0.0053", MFU "6.0%", durations "0:17", device-hours with their unit.
  std::vector<Row> table;
  const auto row = [&](const std::string& label, auto text, auto value) {
    Row r{label, {}, {}};
    for (const auto& s : sums) {
      r.cells.push_back(text(s));
      r.values.push_back(value(s));
    }
    table.push_back(std::move(r));
  };
  using S = db::RunSummary;
  row("status", [](const S& s) { return s.status; }, [](const S& s) { return json(s.status); });
  row("steps", [](const S& s) { return std::to_string(s.steps); }, [](const S& s) { return json(s.steps); });
  row("final_loss", [](const S& s) { return opt_text(s.final_loss); }, [](const S& s) { return opt_json(s.final_loss); });
  row("best_loss", [](const S& s) { return opt_text(s.best_loss); }, [](const S& s) { return opt_json(s.best_loss); });
  row("best_val_loss", [](const S& s) { return opt_text(s.best_val_loss); },
      [](const S& s) { return opt_json(s.best_val_loss); });
  row("tokens", [](const S& s) { return opt_text(s.tokens, "%.0f"); }, [](const S& s) { return json(s.tokens); });
  row("tokens_per_s", [](const S& s) { return opt_text(s.tokens_per_s, "%.1f"); },
      [](const S& s) { return opt_json(s.tokens_per_s); });
  // MFU as a percentage in text, as the app shows it; JSON keeps the fraction (0.0604).
  row("mfu", [](const S& s) { return s.mfu ? runs::mfu_text(*s.mfu) : std::string(); },
      [](const S& s) { return opt_json(s.mfu); });
  row("running_time", [](const S& s) { return runs::clock_text(s.running_s); },
      [](const S& s) { return json(s.running_s); });
  row("training_time", [](const S& s) { return runs::clock_text(s.training_s); },
      [](const S& s) { return json(s.training_s); });
  row("device_hours", [](const S& s) { return runs::device_hours_text(s.gpu_hours, db::device_hours_unit(s.on_gpus)); },
      [](const S& s) { return json(s.gpu_hours); });
  row("device_hours_unit", [](const S& s) { return std::string(db::device_hours_unit(s.on_gpus)); },
      [](const S& s) { return json(db::device_hours_unit(s.on_gpus)); });
  row("cost_usd", [](const S& s) { return runs::usd_text(s.cost_usd); }, [](const S& s) { return opt_json(s.cost_usd); });
  row("usd_per_million_tokens",
      [](const S& s) {
        if (!s.cost_usd) return std::string("unpriced");
        return s.usd_per_million_tokens ? runs::usd_text(s.usd_per_million_tokens) : std::string();
      },
      [](const S& s) { return opt_json(s.usd_per_million_tokens); });

  // Communication (runs/comm_efficiency.h, the newest comm record): the dp group's share of the link
  // it crosses and the share of all communication hidden behind compute; "-" / null where none.
  {
    std::vector<runs::CommHeadline> heads;
    for (const auto& r : runs) heads.push_back(runs::comm_headline(runs::comm_report(db, r.id)));
    const auto comm_row = [&](const std::string& label, std::optional<double> runs::CommHeadline::*field) {
      Row out{label, {}, {}};
      for (const auto& h : heads) {
        out.cells.push_back(h.*field ? runs::share_text(h.*field) : std::string());
        out.values.push_back(opt_json(h.*field));
      }
      table.push_back(std::move(out));
    };
    comm_row("comm_dp_link_share", &runs::CommHeadline::dp_share);
    comm_row("comm_hidden", &runs::CommHeadline::hidden);
  }

  if (!score_metric.empty()) {
    std::vector<runs::ReachHit> hits;
    for (const auto& r : runs) hits.push_back(runs::cost_to_reach_score(db, r, score_metric, score_target));
    const auto hit_row = [&](const std::string& label, auto text, auto value) {
      Row r{label, {}, {}};
      for (const auto& h : hits) {
        r.cells.push_back(h.reached ? text(h) : std::string());
        r.values.push_back(h.reached ? value(h) : json(nullptr));
      }
      table.push_back(std::move(r));
    };
    using H = runs::ReachHit;
    hit_row("score_reached_step", [](const H& h) { return std::to_string(h.step); },
            [](const H& h) { return json(h.step); });
    hit_row("score_there", [](const H& h) { return opt_text(h.value); }, [](const H& h) { return json(h.value); });
    hit_row("score_cost_usd", [](const H& h) { return runs::usd_text(h.usd); }, [](const H& h) { return opt_json(h.usd); });
    hit_row("score_device_hours", [](const H& h) { return runs::device_hours_text(h.device_hours, db::device_hours_unit(h.on_gpus)); },
            [](const H& h) { return json(h.device_hours); });
    hit_row("score_running_s", [](const H& h) { return runs::clock_text(h.running_seconds); },
            [](const H& h) { return json(h.running_seconds); });
  }

  if (as_json) {
    nlohmann::json j;
    if (!score_metric.empty()) j["target_score"] = {{"metric", score_metric}, {"target", score_target},
                                                    {"higher_is_better", runs::score_higher_is_better(score_metric)}};
    j["runs"] = nlohmann::json::array();
    for (size_t i = 0; i < runs.size(); ++i) {
      nlohmann::json r{{"name", runs[i].name}, {"id", runs[i].id}};
      for (const Row& row : table) r[row.label] = row.values[i];
      r["running_s"] = r["running_time"];  // seconds, under the names `runs show --json` uses
      r["training_s"] = r["training_time"];
      r.erase("running_time");
      r.erase("training_time");
      j["runs"].push_back(r);
    }
    j["config_differences"] = nlohmann::json::array();
    for (const auto& d : diffs) j["config_differences"].push_back({{"key", d.key}, {"values", d.values}});
    std::printf("%s\n", j.dump(2).c_str());
    return kExitOk;
  }
  if (csv) {
    std::string header = "measure";
    for (const auto& r : runs) {
      header += ',';  // `"," + string` trips GCC 12's -Wrestrict false positive at -O3
      header += csv_field(r.name);
    }
    std::printf("%s\n", header.c_str());
    for (const Row& row : table) {
      std::string line = row.label;
      for (const auto& c : row.cells) {
        line += ',';
        line += csv_field(c);
      }
      std::printf("%s\n", line.c_str());
    }
    for (const auto& d : diffs) {
      std::string line = csv_field("config." + d.key);
      for (const auto& v : d.values) {
        line += ',';
        line += csv_field(v);
      }
      std::printf("%s\n", line.c_str());
    }
    return kExitOk;
  }
  std::printf("%-24s", "");
  for (const auto& r : runs) std::printf(" %18s", r.name.c_str());
  std::printf("\n");
  for (const Row& row : table) {
    std::printf("%-24s", row.label.c_str());
    for (const auto& c : row.cells) std::printf(" %18s", c.empty() ? "-" : c.c_str());
    std::printf("\n");
  }
  if (diffs.empty()) {
    std::printf("\nconfigs: identical\n");
  } else {
    std::printf("\nconfig differences:\n");
    for (const auto& d : diffs) {
      std::printf("  %-22s", d.key.c_str());
      for (const auto& v : d.values) std::printf(" %18s", v.empty() ? "(absent)" : v.c_str());
      std::printf("\n");
    }
  }
  return kExitOk;
}

}  // namespace flotilla::cli
