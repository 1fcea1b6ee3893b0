// Learning-rate schedules against their closed forms, step by step (1-based steps).
#include <cmath>

#include "check.h"
#include "engine/train/lr_schedule.h"

using flotilla::LrSchedule;

int main() {
  // Warmup is linear from lr/warmup at step 1 to lr at step `warmup`.
  LrSchedule c{"cosine", 1e-3, 0.1, 10, 110, 0.2};
  CHECK_NEAR(c.at(1), 1e-4, 1e-15);
  CHECK_NEAR(c.at(10), 1e-3, 1e-15);
  // Cosine from lr to min_lr over steps 10..110.
  for (int64_t s = 10; s <= 110; s += 7) {
    const double ratio = static_cast<double>(s - 10) / 100.0;
    const double expect = 1e-4 + 0.5 * (1 + std::cos(M_PI * ratio)) * (1e-3 - 1e-4);
    CHECK_NEAR(c.at(s), expect, 1e-15);
  }
  CHECK_NEAR(c.at(60), 0.5 * (1e-3 + 1e-4), 1e-15);  // halfway
  CHECK_NEAR(c.at(110), 1e-4, 1e-15);                // ends at min_lr
  CHECK_NEAR(c.at(500), 1e-4, 1e-15);                // and stays there

  LrSchedule lin{"linear", 2e-3, 0.0, 0, 100, 0.2};
  CHECK_NEAR(lin.at(50), 1e-3, 1e-15);
  CHECK_NEAR(lin.at(100), 0.0, 1e-15);

  LrSchedule k{"constant", 5e-4, 0.1, 5, 100, 0.2};
  CHECK_NEAR(k.at(3), 3e-4, 1e-15);
  CHECK_NEAR(k.at(6), 5e-4, 1e-15);
  CHECK_NEAR(k.at(100), 5e-4, 1e-15);

  // WSD: warmup, stable at lr until the last 20% of steps, then linear to min_lr.
  LrSchedule w{"wsd", 1e-3, 0.1, 10, 100, 0.2};
  CHECK_NEAR(w.at(50), 1e-3, 1e-15);
  CHECK_NEAR(w.at(80), 1e-3, 1e-15);
  CHECK_NEAR(w.at(90), 1e-3 - 0.5 * (1e-3 - 1e-4), 1e-15);
  CHECK_NEAR(w.at(100), 1e-4, 1e-15);
  return flotilla_test::summary("lr_schedule");
}
