// The training loop: config -> data -> model -> steps -> metrics and checkpoints (DESIGN.md §2.4).
//
// One non-obvious decision: everything that makes a run resumable bit for bit lives in exactly
// two places, the checkpoint tensors (parameters, AdamW m and v) and trainer.json (step, tokens,
// RNG state, data cursors, best validation loss). Resume restores both before the first step, so
// N steps + save + new process + load + N steps equals 2N steps straight (tests/engine/
// test_resume_equivalence.cpp, with negative controls that drop each piece).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "engine/config/run_config.h"

namespace flotilla {

struct TrainOptions {
  RunConfig config;
  bool metrics_to_stdout = true;  // mirror the metrics protocol on stdout (the app reads it)
  std::FILE* progress = stderr;   // human-readable progress (nullptr: none)
  int64_t stop_after = 0;         // stop with a checkpoint after this step (0: run to train.steps)
  // Test-only negative controls (docs/reliability.md C11): skip restoring one piece of state on
  // resume: "rng", "cursor", "moments", "lr". Set through FLOTILLA_TEST_SKIP_RESTORE.
  std::string skip_restore;
  double peak_flops = 0;     // peak FLOP/s for MFU; 0 = the kept fp32 FMA ceiling (cpu/peak_cache.h)
  bool check_memory = true;  // refuse (exit 8) a CPU run the planner says does not fit (memory_check.h)
};

// Runs the training described by options.config. Returns the exit code (engine/core/error.h):
// kOk when done, kPreempted after a SIGTERM/SIGINT stop. Throws flotilla::Error for failures.
int run_training(const TrainOptions& options);

}  // namespace flotilla
