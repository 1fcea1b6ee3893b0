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
      "  --efficiency E       fraction of peak the kernels reach (default 0.5)\n"
      "  --measure            measure this CPU's sgemm peak (about 1 s) instead of its nominal peak\n"
      "  --show-config        print the resolved config (TOML, every key) and exit\n\n"
      "Exit status: 0 when the run fits, 8 when it does not (or no --recommend layout fits),\n"
      "3 for an invalid config, 2 for a bad command line.\n\n"
      "Maintainer options:\n"
      "  --print-config-docs  print docs/config.md generated from the config schema\n"
      "  --print-config-keys  print the key list (tests/engine/golden/config_keys.txt)\n");
}

DeviceProfile choose_device(Args& args, const RunConfig& config) {
  const std::string fallback = config.run.device == "cuda" ? "h100-sxm" : "cpu";
  const std::string name = args.value_or("--device", fallback);
  const bool measure = args.flag("--measure");
  DeviceProfile device;
  if (name == "cpu") {
    device =
        measure ? cpu_profile_measured(config.run.threads, 1.0) : cpu_profile_nominal(config.run.threads);
  } else if (!find_gpu_profile(name, config.train.dtype, &device)) {
    std::string known = "cpu";
    for (const auto& n : gpu_profile_names()) known += ", " + n;
    throw_usage("--device '" + name + "' is not a known profile (" + known +
                "); or give --device-flops, "
                "--device-mem-gib and --link-bw");
  }
  if (auto v = args.value("--device-flops")) {
    device.flops_per_s = parse_double(*v, "--device-flops");
    device.name += " (peak set by --device-flops)";
  }
  if (auto v = args.value("--device-mem-gib")) {
    device.mem_bytes = static_cast<uint64_t>(parse_double(*v, "--device-mem-gib") * (1ull << 30));
    device.mem_note = "set by --device-mem-gib";
  }
  if (auto v = args.value("--link-bw")) device.link_bytes_per_s = parse_double(*v, "--link-bw");
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
  interop::apply_hf_init_from(config);  // a Hugging Face folder decides the model's shape
  const bool json = args.flag("--json");
  if (args.flag("--show-config")) {
    args.finish("plan");
    std::fputs(config_to_toml(config).c_str(), stdout);
    return 0;
  }
  const double efficiency = args.double_or("--efficiency", 0.5);
  if (!(efficiency > 0 && efficiency <= 1)) throw_usage("--efficiency must be in (0, 1]");
  const bool recommend = args.flag("--recommend");
  const int world =
      static_cast<int>(args.int_or("--world", config.parallel.dp * config.parallel.tp * config.parallel.pp));
  const size_t top = static_cast<size_t>(args.int_or("--top", 10));
  if (world < 1 || world > 4096) throw_usage("--world must be between 1 and 4096");
  if (!recommend) validate_or_throw(config);
  const DeviceProfile device = choose_device(args, config);
  args.finish("plan");

  PlanOptions options;
  options.efficiency = efficiency;
  if (recommend) {
    const auto layouts = recommend_layouts(config, world, device, options);
    if (json)
      std::printf("%s\n", recommendations_to_json(layouts, top).c_str());
    else
      std::fputs(recommendations_to_text(layouts, world, device, top).c_str(), stdout);
    return layouts.empty() ? static_cast<int>(ExitCode::kOutOfMemory) : 0;
  }
  const Plan plan = make_plan(config, device, options);
  if (json) {
    std::printf("%s\n", plan_to_json(plan).c_str());
  } else {
    std::printf("plan for run '%s'%s\n\n%s", config.run.name.c_str(),
                config_path ? (" (" + *config_path + ")").c_str() : " (default config)",
                plan_to_text(plan).c_str());
  }
  // A plan that does not fit is a failure a script must see (the same exit code train refuses with).
  if (!plan.fits) {
    std::fprintf(stderr, "plan: the run does not fit: it needs %.2f GiB, %s\n",
                 static_cast<double>(plan.needed_bytes()) / (1ull << 30), device.mem_note.c_str());
    return static_cast<int>(ExitCode::kOutOfMemory);
  }
  return 0;
}

}  // namespace flotilla::cli
