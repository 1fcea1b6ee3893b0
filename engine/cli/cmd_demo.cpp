// flotilla-worker demo [--steps N] [--out-dir DIR]: the synthetic corpus and the tiny GPT on the
// CPU, ready in one command. Prints human progress (the loss falling) on stdout.
#include <cstdio>

#include "engine/cli/args.h"
#include "engine/cli/commands.h"
#include "engine/config/config_io.h"
#include "engine/data/synthetic.h"
#include "engine/train/trainer.h"
#include "flotilla/demo_config.h"

namespace flotilla::cli {

// The demo config: resources/configs/demo.toml, embedded at build time.
RunConfig demo_config() { return parse_config_toml(kDemoConfigToml, "resources/configs/demo.toml"); }

int cmd_demo(const CommandArgs& argv) {
  Args args(argv);
  if (args.flag("--help")) {
    std::printf(
        "Usage: flotilla-worker demo [--steps N] [--out-dir DIR] [--set KEY=VALUE]...\n\n"
        "Writes a deterministic synthetic corpus (vocab 512) and trains the tiny GPT (4 layers,\n"
        "width 256) on the CPU, printing the loss as it falls. The run directory (default\n"
        "runs/demo) holds the config, metrics.jsonl and checkpoints, so `train --config\n"
        "runs/demo/config.toml` resumes it.\n");
    return 0;
  }
  RunConfig cfg = demo_config();
  std::vector<std::string> sets = args.values("--set");
  if (auto steps = args.value("--steps")) sets.push_back("train.steps=" + *steps);
  if (auto out = args.value("--out-dir")) sets.push_back("run.out_dir=" + *out);
  args.finish("demo");
  apply_overrides(cfg, sets);
  const SyntheticStats st = synthetic_stats(cfg.model.vocab_size, cfg.run.seed);
  std::printf(
      "Flotilla demo: tiny GPT on a synthetic corpus. An untrained model scores ln(%d) = %.2f;\n"
      "a model that learns token frequencies %.2f; the best possible loss is %.2f.\n\n",
      cfg.model.vocab_size, st.uniform_entropy, st.unigram_entropy, st.entropy_rate);
  TrainOptions opt;
  opt.config = cfg;
  opt.metrics_to_stdout = false;
  opt.progress = stdout;
  return run_training(opt);
}

}  // namespace flotilla::cli
