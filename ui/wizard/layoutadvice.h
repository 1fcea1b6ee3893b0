// The Hardware page's advice: the fastest layout this build can train that fits the target's
// memory, found by the engine's planner (recommend_layouts) at the chosen number of ranks and at
// every device the target has, whichever predicts the shorter step.
//
// Decision: layouts the build cannot train yet (tensor or pipeline parallel) are never applied,
// but a faster one is named, so the user learns what the missing feature would buy. A candidate may
// also change how the model trains (the planner weighs full fine-tuning against LoRA): applying it
// sets the draft's [lora] too, and the planner's note on the candidate is shown as it wrote it.
#pragma once

#include <QString>

#include <optional>

#include "engine/config/run_config.h"
#include "engine/plan/planner.h"
#include "ui/wizard/configdraft.h"

namespace flotilla::ui {

struct LayoutAdvice {
  int ranks = 0;                              // world size of the advised layout
  std::optional<flotilla::RunConfig> config;  // the base config with the layout applied
  std::optional<flotilla::Plan> plan;
  QString text;  // one paragraph for the page
  QString
      note;  // the planner's note on the advised candidate (why LoRA or full training) as a sentence, or ""
};

// Pure and thread-safe: run it off the UI thread.
LayoutAdvice adviseLayout(const flotilla::RunConfig& base, const HardwareTarget& target, int ranks);

// Writes a found layout into config (parallel.*, train.micro_batch and the global batch, which
// is written as 0 when it equals the layout's natural micro_batch x seq_len x dp batch), and its
// [lora] section when the candidate trains differently (LoRA on or off, another rank or targets).
void applyLayout(const flotilla::RunConfig& layout, flotilla::RunConfig& config);

// What Recommend changed, in words: each field that moved (old → new; "training full fine-tune →
// LoRA r 16, alpha 32, all-linear" when the candidate switched), that the global batch stayed,
// and the planner's memory per device and step time before and after ("Nothing to change" when the
// layout already was the advice). A plan is empty while its config is invalid.
QString describeLayoutChange(const flotilla::RunConfig& before, int ranksBefore,
                             const std::optional<flotilla::Plan>& planBefore, const flotilla::RunConfig& after,
                             int ranksAfter, const std::optional<flotilla::Plan>& planAfter);

// "dp 4 × ZeRO 2, micro-batch 8 (accumulation 2)" for a plan.
QString layoutText(const flotilla::Plan& plan);

}  // namespace flotilla::ui
