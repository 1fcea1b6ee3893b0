// flotilla-worker train --config run.toml [--resume auto|none|DIR] [--set key=value]... [--stop-after N]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/cli/args.h"
#include "engine/cli/commands.h"
#include "engine/comm/slurm_env.h"
#include "engine/config/config_io.h"
#include "engine/core/error.h"
#include "engine/train/trainer.h"

namespace flotilla::cli {

int cmd_train(const CommandArgs& argv) {
  Args args(argv);
  if (args.flag("--help")) {
    std::printf(
        "Usage: flotilla-worker train --config run.toml [options]\n\n"
        "Trains the model described by the run config. Metrics (docs/metrics-protocol.md) go to\n"
        "stdout and to <run.out_dir>/metrics.jsonl; progress goes to stderr.\n\n"
        "Options:\n"
        "  --config FILE        run config (TOML, docs/config.md)\n"
        "  --set KEY=VALUE      override a config key (repeatable), e.g. --set train.steps=50\n"
        "  --resume MODE        auto (newest verified checkpoint, default), none, or a checkpoint dir\n"
        "  --out-dir DIR        same as --set run.out_dir=DIR\n"
        "  --stop-after N       stop after step N with a checkpoint (the schedule still spans train.steps)\n"
        "  --quiet              no progress on stderr\n"
        "  --ignore-memory-limit  start even when the planner says the run does not fit in the memory\n"
        "                       this process can use (otherwise exit 8; also "
        "FLOTILLA_IGNORE_MEMORY_LIMIT=1)\n"
        "  --no-stdout-metrics  do not mirror metrics on stdout (metrics.jsonl is still written)\n\n"
        "Signals: SIGTERM/SIGINT stop at the next step (checkpoint when the grace period allows,\n"
        "exit code 10); SIGUSR1 checkpoints at the next step and continues.\n"
        "Under srun (SLURM_PROCID set, RANK unset) the SLURM_* task variables become RANK, WORLD_SIZE,\n"
        "LOCAL_RANK, MASTER_ADDR (first node of SLURM_JOB_NODELIST) and MASTER_PORT (docs/slurm.md).\n");
    return 0;
  }
  const auto config_path = args.value("--config");
  auto sets = args.values("--set");
  if (auto resume = args.value("--resume")) sets.push_back("checkpoint.resume=" + *resume);
  if (auto out = args.value("--out-dir")) sets.push_back("run.out_dir=" + *out);
  TrainOptions opt;
  opt.stop_after = args.int_or("--stop-after", 0);
  if (args.flag("--quiet")) opt.progress = nullptr;
  const char* ignore_env = std::getenv("FLOTILLA_IGNORE_MEMORY_LIMIT");
  opt.check_memory = !args.flag("--ignore-memory-limit") && !(ignore_env && std::string(ignore_env) == "1");
  opt.metrics_to_stdout = !args.flag("--no-stdout-metrics");
  args.finish("train");
  if (!config_path) throw_usage("train needs --config FILE (see flotilla-worker train --help)");
  comm::apply_slurm_env();  // a task started by srun: SLURM_* -> RANK, WORLD_SIZE, MASTER_ADDR, ...
  opt.config = load_config(*config_path, sets);
  if (const char* skip = std::getenv("FLOTILLA_TEST_SKIP_RESTORE")) opt.skip_restore = skip;
  if (const char* peak = std::getenv("FLOTILLA_PEAK_FLOPS")) opt.peak_flops = std::atof(peak);
  return run_training(opt);
}

}  // namespace flotilla::cli
