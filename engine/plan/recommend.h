// plan --recommend: rank the parallel layouts that fit the given devices by predicted step time,
// so a user chooses between data, tensor and pipeline parallelism (and ZeRO, micro-batch size,
// accumulation) with numbers instead of folklore.
//
// Decision: the global batch (tokens per optimizer step) is held fixed, since it is a training
// hyper-parameter, not a performance knob; everything else that keeps the math the same varies:
// dp x tp x pp = world, ZeRO stage, micro-batch size (accumulation follows). Layouts this build
// cannot run yet are listed but marked, never silently dropped or silently recommended.
#pragma once

#include <string>
#include <vector>

#include "engine/config/run_config.h"
#include "engine/plan/planner.h"

namespace flotilla {

struct LayoutCandidate {
  RunConfig config;  // the base config with the layout applied
  Plan plan;
  bool runnable = true;  // this build trains it (tp and pp > 1 run on the CPU backend only)
  std::string note;      // why not runnable, or ""
};

// Every valid layout for `world` ranks that fits the device memory, fastest first. `base` supplies
// the model, the global batch and everything else. Empty when nothing fits.
std::vector<LayoutCandidate> recommend_layouts(const RunConfig& base, int world, const DeviceProfile& device,
                                               const PlanOptions& options = {});

std::string recommendations_to_text(const std::vector<LayoutCandidate>& c, int world,
                                    const DeviceProfile& device, size_t top);
std::string recommendations_to_json(const std::vector<LayoutCandidate>& c, size_t top);

}  // namespace flotilla
