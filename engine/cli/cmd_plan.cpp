// flotilla-worker plan: what a run config costs before it runs (parameters, FLOPs, memory per
// device, communication, predicted step time), as a table or JSON.
//
// Decision: `plan` also hosts the config maintainer outputs (--print-config-docs, --print-config-keys),
// because it is the command that already reads configs and they need no run; the tests print the
// exact command to regenerate docs/config.md and the golden key list.
#include <cstdio>
#include <string>

#include "engine/cli/args.h"
#include "engine/cli/commands.h"
#include "engine/config/config_io.h"
#include "engine/config/config_schema.h"
#include "engine/config/config_validate.h"
#include "engine/core/error.h"
#include "engine/interop/hf_model.h"
#include "engine/interop/peft.h"
#include "engine/plan/calibration.h"
#include "engine/plan/planner.h"
#include "engine/plan/recommend.h"

namespace flotilla::cli {
namespace {

void print_help() {
  std::printf(
      "Usage: flotilla-worker plan [--config run.toml] [--set key=value]... [options]\n\n"
      "Parameters, FLOPs per token, memory per device by component, communication per step and the\n"
      "predicted step time of a run config (the defaults when --config is not given).\n\n"
      "Options:\n"
      "  --config PATH        run config (TOML); see docs/config.md\n"
      "  --set key=value      override one config key (repeatable), e.g. --set model.preset=gpt2-124m\n"
      "  --json               print JSON instead of the table\n"
      "  --recommend          rank every dp x tp x pp x zero x micro-batch layout that fits, fastest first\n"
      "  --world N            ranks for --recommend (default: parallel.dp x tp x pp of the config)\n"
      "  --top K              layouts shown by --recommend (default 10)\n"
      "  --device NAME        cpu (default for run.device = cpu) or a GPU profile:");
  for (const auto& n : gpu_profile_names()) std::printf(" %s", n.c_str());
  std::printf(
      "\n"
      "  --device-flops X     peak FLOP/s of one device (overrides the profile)\n"
      "  --device-mem-gib X   memory of one device in GiB (overrides the profile)\n"
      "  --link-bw X          collective bus bandwidth between ranks in bytes/s\n"
      "  --efficiency E       fraction of peak the kernels reach (default: calibrated, see below)\n"
      "  --measure            measure this CPU's sgemm peak (about 1 s) instead of its nominal peak\n"
      "  --no-calibrate       plan with the nominal peak x 0.5 (no kept peak, no measurement)\n\n"
      "On the CPU the step time is calibrated (docs/planner.md): this machine's kept FMA ceiling\n"
      "for the dtype and threads (measured now when none is kept) x a default efficiency, and\n"
      "communication over the link figures bench-comm kept. `flotilla plan` also learns the\n"
      "efficiency from the store's earlier runs of the same model and layout.\n"
      "  --show-config        print the resolved config (TOML, every key) and exit\n\n"
      "Exit status: 0 when the run fits, 8 when it does not (or no --recommend layout fits),\n"
      "3 for an invalid config, 2 for a bad command line.\n\n"
      "Maintainer options:\n"
      "  --print-config-docs  print docs/config.md generated from the config schema\n"
      "  --print-config-keys  print the key list (tests/engine/golden/config_keys.txt)\n");
}

// *own_cpu: the profile is this machine's nominal CPU, the one a calibration may replace (a named
// GPU, a measured sgemm or a given peak is what the user asked for and is kept).
DeviceProfile choose_device(Args& args, const RunConfig& config, bool* own_cpu, bool* link_given) {
  const std::string fallback = config.run.device == "cuda" ? "h100-sxm" : "cpu";
  const std::string name = args.value_or("--device", fallback);
  const bool measure = args.flag("--measure");
  DeviceProfile device;
  if (name == "cpu") {
    device =
        measure ? cpu_profile_measured(rank_threads(config), 1.0) : cpu_profile_nominal(rank_threads(config));
  } else if (!find_gpu_profile(name, config.train.dtype, &device)) {
    std::string known = "cpu";
    for (const auto& n : gpu_profile_names()) known += ", " + n;
    throw_usage("--device '" + name + "' is not a known profile (" + known +
                "); or give --device-flops, "
                "--device-mem-gib and --link-bw");
  }
  *own_cpu = name == "cpu" && !measure && config.run.device == "cpu";
  if (auto v = args.value("--device-flops")) {
    *own_cpu = false;
    device.flops_per_s = parse_double(*v, "--device-flops");
    device.name += " (peak set by --device-flops)";
  }
  if (auto v = args.value("--device-mem-gib")) {
    device.mem_bytes = static_cast<uint64_t>(parse_double(*v, "--device-mem-gib") * (1ull << 30));
    device.mem_note = "set by --device-mem-gib";
  }
  if (auto v = args.value("--link-bw")) {
    device.link_bytes_per_s = parse_double(*v, "--link-bw");
    *link_given = true;
  }
  if (device.flops_per_s <= 0) throw_usage("--device-flops must be > 0");
  return device;
}

}  // namespace

int cmd_plan(const CommandArgs& argv) {
  Args args(argv);
  if (args.flag("--help") || args.flag("-h")) {
    print_help();
    return 0;
  }
  if (args.flag("--print-config-docs")) {
    args.finish("plan");
    std::fputs(config_docs_markdown().c_str(), stdout);
    return 0;
  }
  if (args.flag("--print-config-keys")) {
    args.finish("plan");
    std::fputs(config_key_list().c_str(), stdout);
    return 0;
  }

  const auto config_path = args.value("--config");
  RunConfig config = config_path ? load_config_file(*config_path) : RunConfig{};
  apply_overrides(config, args.values("--set"));
  interop::apply_hf_init_from(config);    // a Hugging Face folder decides the model's shape
  interop::apply_lora_init_from(config);  // a PEFT adapter folder decides the adapters' shape
  const bool json = args.flag("--json");
  if (args.flag("--show-config")) {
    args.finish("plan");
    std::fputs(config_to_toml(config).c_str(), stdout);
    return 0;
  }
  const auto efficiency_arg = args.value("--efficiency");
  const double efficiency =
      efficiency_arg ? parse_double(*efficiency_arg, "--efficiency") : kNominalEfficiency;
  if (!(efficiency > 0 && efficiency <= 1)) throw_usage("--efficiency must be in (0, 1]");
  const bool no_calibrate = args.flag("--no-calibrate");
  const bool recommend = args.flag("--recommend");
  const int world =
      static_cast<int>(args.int_or("--world", config.parallel.dp * config.parallel.tp * config.parallel.pp));
  const size_t top = static_cast<size_t>(args.int_or("--top", 10));
  if (world < 1 || world > 4096) throw_usage("--world must be between 1 and 4096");
  if (!recommend) validate_or_throw(config, 0, ValidateFor::kPlan);
  bool own_cpu = false;
  bool link_given = false;
  const DeviceProfile device = choose_device(args, config, &own_cpu, &link_given);
  args.finish("plan");

  PlanOptions options;
  options.efficiency = efficiency;
  if (recommend) {
    FineTuneAdvice advice;
    const auto layouts = recommend_layouts(config, world, device, options, &advice);
    if (json)
      std::printf("%s\n", recommendations_to_json(layouts, top, advice).c_str());
    else
      std::fputs(recommendations_to_text(layouts, world, device, top, advice).c_str(), stdout);
    return layouts.empty() ? static_cast<int>(ExitCode::kOutOfMemory) : 0;
  }
  Calibration calibration = own_cpu && !no_calibrate ? machine_calibration(config, true) : Calibration{};
  if (efficiency_arg) calibration.efficiency = efficiency;
  if (link_given) calibration.link = {};  // --link-bw is what the user asked for
  const CalibratedPlan calibrated = plan_calibrated(config, device, calibration);
  const Plan& plan = calibrated.plan;
  if (json) {
    std::printf("%s\n", calibrated_plan_to_json(calibrated).c_str());
  } else {
    std::printf("plan for run '%s'%s\n\n%s", config.run.name.c_str(),
                config_path ? (" (" + *config_path + ")").c_str() : " (default config)",
                calibrated_plan_text(calibrated).c_str());
  }
  // A plan that does not fit is a failure a script must see (the same exit code train refuses with).
  if (!plan.fits) {
    const std::string margin =
        plan.margin_bytes() > 0 ? " plus a margin of " + memory_margin_text(plan.needed_bytes(), plan.ranks) : "";
    std::fprintf(stderr, "plan: the run does not fit: it needs %.2f GiB%s, %s\n",
                 static_cast<double>(plan.needed_bytes()) / (1ull << 30), margin.c_str(), device.mem_note.c_str());
    return static_cast<int>(ExitCode::kOutOfMemory);
  }
  return 0;
}

}  // namespace flotilla::cli
