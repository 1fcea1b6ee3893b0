// Learning-rate schedules: constant, warmup + cosine, linear, WSD (warmup-stable-decay).
//
// Steps are 1-based as in the metrics protocol: step 1 is the first optimizer update. Warmup is
// linear from lr/warmup at step 1 to lr at step `warmup_steps` (never 0, so step 1 already learns).
// Every decaying schedule ends at min_lr = lr * min_lr_ratio on the last step.
#pragma once

#include <cstdint>
#include <string>

namespace flotilla {

struct LrSchedule {
  std::string kind = "cosine";  // constant | cosine | linear | wsd
  double lr = 6e-4;
  double min_lr_ratio = 0.1;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double decay_fraction = 0.2;  // wsd only

  double at(int64_t step) const;  // lr for 1-based step
};

}  // namespace flotilla
