// The launch supervisor's stall limit: the init timeout before the first step, then the step
// timeout raised to 3x the slowest step seen, so slow-but-steady ranks (a large model on CPUs,
// minutes a step) are never declared stalled while a hung one still is.
#include "check.h"
#include "engine/launch/launcher.h"

using flotilla::LaunchOptions;
using flotilla::stall_limit_s;

int main() {
  LaunchOptions o;
  o.init_timeout_s = 300;
  o.step_timeout_s = 100;
  CHECK_NEAR(stall_limit_s(o, 0, 0), 300, 1e-12);     // before the first step: init
  CHECK_NEAR(stall_limit_s(o, 0, 500), 300, 1e-12);   // (no step measured yet counts)
  CHECK_NEAR(stall_limit_s(o, 1, 0), 100, 1e-12);     // fast steps: the step timeout
  CHECK_NEAR(stall_limit_s(o, 7, 20), 100, 1e-12);    // 3 x 20 s < 100 s
  CHECK_NEAR(stall_limit_s(o, 7, 40), 120, 1e-12);    // 3 x 40 s: a 40 s step is not a stall
  CHECK_NEAR(stall_limit_s(o, 7, 250), 750, 1e-12);   // minutes a step on CPUs
  o.step_timeout_s = 0;                                 // detection off
  CHECK_NEAR(stall_limit_s(o, 7, 250), 0, 1e-12);
  return flotilla_test::summary("launch_stall_limit");
}
