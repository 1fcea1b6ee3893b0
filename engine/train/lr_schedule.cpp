// Learning-rate schedules (see lr_schedule.h for the conventions).
#include "engine/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace flotilla {

double LrSchedule::at(int64_t step) const {
  const double min_lr = lr * min_lr_ratio;
  if (warmup_steps > 0 && step <= warmup_steps)
    return lr * static_cast<double>(step) / static_cast<double>(warmup_steps);
  if (kind == "constant") return lr;
  if (kind == "wsd") {
    const int64_t decay_steps =
        std::max<int64_t>(1, static_cast<int64_t>(std::llround(decay_fraction * total_steps)));
    const int64_t decay_start = total_steps - decay_steps;
    if (step <= decay_start) return lr;
    const double frac = static_cast<double>(step - decay_start) / static_cast<double>(decay_steps);
    return lr - (lr - min_lr) * std::min(1.0, frac);
  }
  const int64_t span = std::max<int64_t>(1, total_steps - warmup_steps);
  const double ratio =
      std::clamp(static_cast<double>(step - warmup_steps) / static_cast<double>(span), 0.0, 1.0);
  if (kind == "linear") return lr - (lr - min_lr) * ratio;
  // cosine
  return min_lr + 0.5 * (1.0 + std::cos(M_PI * ratio)) * (lr - min_lr);
}

}  // namespace flotilla
