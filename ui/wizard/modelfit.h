// The Model page's "what fits" line: the planner's peak memory per device for the draft's model on
// the draft's hardware and layout (the same plan the Hardware page's memory bar draws), and, when
// it does not fit, which single change the planner says would make it fit.
//
// Decision: no memory formula lives here. Every figure is a make_plan() of the draft or of the
// draft with one knob turned (recompute, micro-batch 1 with accumulation, ZeRO-2, every device of
// the target, bf16 on a GPU); a knob is named only when that plan is valid and fits, so the advice
// is always something the planner really confirmed. The full layout search stays on the Hardware
// page (Recommend), off the UI thread; these are at most five plans.
#pragma once

#include <QString>

#include "engine/config/run_config.h"
#include "ui/wizard/configdraft.h"

namespace flotilla::ui {

struct FitCheck {
  bool planned = false;  // the config is valid, so the planner ran
  bool fits = false;
  quint64 used = 0, capacity = 0;  // peak bytes per device, device bytes
  QString text;                    // one line for the page
};

FitCheck checkFit(const flotilla::RunConfig& config, const HardwareTarget& target, int ranks);

}  // namespace flotilla::ui
