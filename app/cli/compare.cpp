// `flotilla compare RUN RUN... [--csv|--json]`: run summaries side by side and the config keys
// whose values differ.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "app/cli/cli.h"
#include "db/costs.h"
#include "db/queries.h"
#include "db/run_store.h"
#include "runs/run_speed.h"

namespace flotilla::cli {
namespace {

std::string opt_text(const std::optional<double>& v, const char* fmt = "%.4f") {
  if (!v) return "";
  char buf[48];
  std::snprintf(buf, sizeof buf, fmt, *v);
  return buf;
}

std::string num_text(double v, const char* fmt) {
  char buf[48];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

}  // namespace

int cmd_compare(const Context& ctx) {
  ArgReader args(ctx.args, "compare");
  if (args.flag("--help")) {
    std::printf(
        "Usage: flotilla compare RUN RUN... [--csv|--json]\n\n"
        "Final and best loss, tokens, tokens/s, MFU, wall time, device-hours (GPU-h or CPU-h), cost and cost per\n"
        "million tokens of each run, then the config keys whose values differ.\n");
    return kExitOk;
  }
  const bool csv = args.flag("--csv");
  const bool as_json = args.flag("--json");
  const auto pos = args.positionals();
  if (pos.size() < 2) throw UsageError("compare needs at least two runs");
  const db::Database db = open_store(ctx);
  std::vector<db::Run> runs;
  std::vector<db::RunSummary> sums;
  for (const auto& p : pos) {
    runs.push_back(db::get_run(db, p));
    sums.push_back(runs::run_summary(db, runs.back().id));
  }
  const auto diffs = db::config_differences(runs);

  // One table: rows are measures, columns are runs.
  std::vector<std::pair<std::string, std::vector<std::string>>> table;
  const auto row = [&](const std::string& label, auto get) {
    std::vector<std::string> cells;
    for (const auto& s : sums) cells.push_back(get(s));
    table.emplace_back(label, cells);
  };
  row("status", [](const db::RunSummary& s) { return s.status; });
  row("steps", [](const db::RunSummary& s) { return std::to_string(s.steps); });
  row("final_loss", [](const db::RunSummary& s) { return opt_text(s.final_loss); });
  row("best_loss", [](const db::RunSummary& s) { return opt_text(s.best_loss); });
  row("best_val_loss", [](const db::RunSummary& s) { return opt_text(s.best_val_loss); });
  row("tokens", [](const db::RunSummary& s) { return num_text(s.tokens, "%.0f"); });
  row("tokens_per_s", [](const db::RunSummary& s) { return opt_text(s.tokens_per_s, "%.1f"); });
  row("mfu", [](const db::RunSummary& s) { return opt_text(s.mfu, "%.4f"); });
  row("wall_s", [](const db::RunSummary& s) { return num_text(s.wall_s, "%.1f"); });
  // Device-hours under their historical key; the unit row says GPU-h (GPU runs) or CPU-h.
  row("gpu_hours", [](const db::RunSummary& s) { return num_text(s.gpu_hours, "%.4f"); });
  row("hours_unit", [](const db::RunSummary& s) { return std::string(db::device_hours_unit(s.on_gpus)); });
  row("cost_usd", [](const db::RunSummary& s) { return num_text(s.cost_usd, "%.2f"); });
  row("usd_per_million_tokens",
      [](const db::RunSummary& s) { return opt_text(s.usd_per_million_tokens, "%.4f"); });

  if (as_json) {
    nlohmann::json j;
    j["runs"] = nlohmann::json::array();
    for (size_t i = 0; i < runs.size(); ++i) {
      nlohmann::json r{{"name", runs[i].name}, {"id", runs[i].id}};
      for (const auto& [label, cells] : table) r[label] = cells[i];
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
    for (const auto& [label, cells] : table) {
      std::string line = label;
      for (const auto& c : cells) {
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
  for (const auto& [label, cells] : table) {
    std::printf("%-24s", label.c_str());
    for (const auto& c : cells) std::printf(" %18s", c.empty() ? "-" : c.c_str());
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
