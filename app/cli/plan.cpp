// `flotilla plan CONFIG.toml [--set K=V]... [--json]`: the worker's plan, calibrated with what this
// machine measured, including the store's earlier runs of the same model and layout.
//
// Decision: the same engine functions as `flotilla-worker plan` (plan_calibrated,
// calibrated_plan_text); this command only adds the store's history, which the worker cannot read,
// and with --nodes the slowest link measured among those nodes (runs/plan_links.h).
#include <cstdio>

#include <nlohmann/json.hpp>

#include "app/cli/cli.h"
#include "engine/config/config_io.h"
#include "engine/config/config_validate.h"
#include "engine/interop/hf_model.h"
#include "engine/plan/calibration.h"
#include "engine/plan/planner.h"
#include "runs/plan_history.h"
#include "runs/plan_links.h"

namespace flotilla::cli {

int cmd_plan(const Context& ctx) {
  ArgReader args(ctx.args, "plan");
  if (args.flag("--help")) {
    std::printf(
        "Usage: flotilla plan CONFIG.toml [--set KEY=VALUE]... [--json] [--device NAME] [--nodes A,B,...]\n\n"
        "Memory, communication and the predicted step time of a run config, as flotilla-worker plan,\n"
        "calibrated with this machine's kept peak (measured now when none is kept), the link figures\n"
        "bench-comm kept, and the efficiency of the store's earlier runs of the same model and layout\n"
        "on this machine; the last such run is shown predicted against measured (docs/planner.md).\n"
        "--device names a GPU profile for a cuda run (default h100-sxm).\n"
        "--nodes plans the layout across those stored nodes: the slowest link measured among them\n"
        "(flotilla nodes links) is the communication term's link, and the output says so.\n");
    return kExitOk;
  }
  const std::vector<std::string> sets = args.values("--set");
  const bool as_json = args.flag("--json");
  const std::optional<std::string> device_name = args.value("--device");
  std::vector<std::string> nodes;
  if (const auto list = args.value("--nodes")) {
    size_t at = 0;
    while (at <= list->size()) {
      const size_t comma = list->find(',', at);
      const std::string name = list->substr(at, comma == std::string::npos ? std::string::npos : comma - at);
      if (!name.empty()) nodes.push_back(name);
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
  }
  const auto pos = args.positionals();
  if (pos.size() != 1) throw UsageError("plan needs exactly one CONFIG.toml (flotilla plan --help)");
  RunConfig config = load_config(pos[0], sets);
  interop::apply_hf_init_from(config);
  validate_or_throw(config);

  DeviceProfile nominal;
  if (config.run.device == "cpu" && !device_name) {
    nominal = cpu_profile_nominal(rank_threads(config));
  } else if (!find_gpu_profile(device_name.value_or("h100-sxm"), config.train.dtype, &nominal)) {
    throw UsageError("--device '" + *device_name + "' is not a known GPU profile");
  }
  const db::Database db = open_store(ctx, "flotilla plan");
  Calibration calibration = runs::store_calibration(db, config, true);
  const std::string link_line = runs::apply_measured_link(db, nodes, calibration);
  const CalibratedPlan plan = plan_calibrated(config, nominal, calibration);
  if (as_json) {
    auto j = nlohmann::json::parse(calibrated_plan_to_json(plan));
    if (!nodes.empty() && j.contains("calibration") && j["calibration"].is_object())
      j["calibration"]["link"] = {{"line", link_line},
                                  {"source", calibration.link.source},
                                  {"bytes_per_s", calibration.link.bytes_per_s},
                                  {"latency_s", calibration.link.latency_s}};
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("plan for %s\n\n%s", pos[0].c_str(), calibrated_plan_text(plan).c_str());
    if (!link_line.empty()) std::printf("  %s\n", link_line.c_str());
  }
  return plan.plan.fits ? kExitOk : 8;
}

}  // namespace flotilla::cli
