// plan --recommend: rank the parallel layouts that fit the given devices by predicted step time,
// so a user chooses between data, tensor and pipeline parallelism (and ZeRO, micro-batch size,
// accumulation) with numbers instead of folklore.
//
// Decision: the global batch (tokens per optimizer step) is held fixed, since it is a training
// hyper-parameter, not a performance knob; everything else that keeps the math the same varies:
// dp x tp x pp = world, ZeRO stage, micro-batch size (accumulation follows). Layouts this build
// cannot run yet are listed but marked, never silently dropped or silently recommended.
//
// A fine-tune (model.init_from set, or lora.enabled) also weighs the method: full fine-tuning and
// LoRA (the config's [lora], or rank 16 on every projection when it is off) are both planned. The
// method the config asks for ranks first when one of its layouts fits (it changes what is
// trained, so a faster LoRA never silently displaces a full fine-tune that fits), the other method
// after it; every candidate's note says why, with the numbers ("full fine-tuning does not fit: ...").
#pragma once

#include <string>
#include <vector>

#include "engine/config/run_config.h"
#include "engine/plan/planner.h"

namespace flotilla {

struct LayoutCandidate {
  // The base config with the layout applied; for a fine-tune also the method: lora.enabled and
  // its rank, alpha and targets as planned (a wizard applies config.lora with the layout).
  RunConfig config;
  Plan plan;
  bool runnable = true;  // this build trains it (tp and pp > 1 run on the CPU backend only)
  std::string note;      // why not runnable; for a fine-tune then why this method ("LoRA trains ..."); or ""
};

// What a fine-tune's search weighed: each method's verdict in one sentence, with its numbers.
struct FineTuneAdvice {
  bool fine_tune = false;    // model.init_from set or lora.enabled: both methods were planned
  bool prefer_lora = false;  // the config asks for LoRA
  bool full_fits = false, lora_fits = false;
  std::string full;  // "full fine-tuning fits: ..." / "full fine-tuning does not fit: ..."
  std::string lora;  // "LoRA (r 16 on all-linear) trains 0.52% of the parameters and fits: ..."
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
