// plan --recommend: rank the parallel layouts that fit the given devices by predicted step time,
// so a user chooses between data, tensor and pipeline parallelism (and ZeRO, micro-batch size,
// accumulation) with numbers instead of folklore.
//
// Decision: the global batch (tokens per optimizer step) is held fixed, since it is a training
// hyper-parameter, not a performance knob; everything else that keeps the math the same varies:
// dp x tp x pp = world, ZeRO stage, micro-batch size (accumulation follows). Layouts this build
// cannot run yet are listed but marked, never silently dropped or silently recommended.
//
// A fine-tune (model.init_from set, or lora.enabled) also weighs the method: full fine-tuning, LoRA
// (the config's [lora], or rank 16 on every projection when it is off) and QLoRA (the same adapters
// over a 4-bit NF4 base, lora.base_quant = "nf4") are all planned. The method the config asks for
// ranks first when one of its layouts fits (it changes what is trained, so a faster LoRA never
// silently displaces a full fine-tune that fits), the others after it in that order; every
// candidate's note says why, with the numbers ("full fine-tuning does not fit: ..."). The advice
// also says in one line what each method needs of the GPUs the planner knows
// ("Llama-3.1-8B: full fine-tune needs 2 × 80 GB; LoRA 1 × 40 GB; QLoRA 1 × 24 GB"): for each, the
// fewest cards (1, 2, 4, 8), then the smallest card, on which some layout fits.
#pragma once

#include <string>
#include <vector>

#include "engine/config/run_config.h"
#include "engine/plan/planner.h"

namespace flotilla {

// How a fine-tune trains: every weight, adapters over the base in the compute dtype, or adapters
// over a 4-bit NF4 base.
enum class FineTuneMethod { kFull, kLora, kQlora };
FineTuneMethod method_of(const LoraSection& lora);
const char* method_name(FineTuneMethod m);  // "full fine-tune", "LoRA", "QLoRA"

struct LayoutCandidate {
  // The base config with the layout applied; for a fine-tune also the method: lora.enabled and
  // its rank, alpha, targets and base_quant as planned (a wizard applies config.lora with the layout).
  RunConfig config;
  Plan plan;
  bool runnable = true;  // this build trains it (tp and pp > 1 run on the CPU backend only)
  std::string note;      // why not runnable; for a fine-tune then why this method ("LoRA trains ..."); or ""
};

// What one method needs of the planner's GPU profiles: `count` cards of `profile` (the fewest
// cards of 1, 2, 4, 8, then the smallest card), with the per-card figure of the layout that needs
// least there. count 0: nothing up to eight of the largest card fits.
struct MethodNeed {
  FineTuneMethod method = FineTuneMethod::kFull;
  int count = 0;
  std::string profile;     // "a10-24gb"
  uint64_t mem_bytes = 0;  // the card's memory
  uint64_t needed_bytes = 0;
  std::string text;  // "1 × 24 GB"
};
// The three methods' needs for the config's model, micro-batch, sequence length and recompute,
// planned in bf16 on GPUs (the global batch free to take any data-parallel degree), and the line
// "NAME: full fine-tune needs 4 × 80 GB; LoRA 1 × 40 GB; QLoRA 1 × 24 GB (...)".
struct FineTuneNeeds {
  std::vector<MethodNeed> needs;  // full, LoRA, QLoRA
  std::string text;
};
FineTuneNeeds fine_tune_needs(const RunConfig& base, const PlanOptions& options = {});

// What a fine-tune's search weighed: each method's verdict in one sentence, with its numbers.
struct FineTuneAdvice {
  bool fine_tune = false;     // model.init_from set or lora.enabled: every method was planned
  bool prefer_lora = false;   // the config asks for LoRA (or QLoRA)
  bool prefer_qlora = false;  // the config asks for QLoRA (lora.base_quant = "nf4")
  bool full_fits = false, lora_fits = false, qlora_fits = false;
  std::string full;   // "full fine-tuning fits: ..." / "full fine-tuning does not fit: ..."
  std::string lora;   // "LoRA (r 16 on all-linear) trains 0.52% of the parameters and fits: ..."
  std::string qlora;  // "QLoRA (r 16 ..., 4-bit NF4 base at 4.127 bits) trains ..."
  std::string needs;  // fine_tune_needs(...).text
};

// Every valid layout for `world` ranks that fits the device memory, fastest first (a fine-tune: the
// asked-for method's first, see above). `base` supplies the model, the global batch and everything
// else. Empty when nothing fits. `advice` (optional) receives the fine-tune verdicts.
std::vector<LayoutCandidate> recommend_layouts(const RunConfig& base, int world, const DeviceProfile& device,
                                               const PlanOptions& options = {},
                                               FineTuneAdvice* advice = nullptr);

std::string recommendations_to_text(const std::vector<LayoutCandidate>& c, int world,
                                    const DeviceProfile& device, size_t top,
                                    const FineTuneAdvice& advice = {});
std::string recommendations_to_json(const std::vector<LayoutCandidate>& c, size_t top,
                                    const FineTuneAdvice& advice = {});

}  // namespace flotilla
