// Pipeline parallelism (issue 4), with real Gloo ranks:
//  1. The schedules: GPipe and 1F1B action orders, activation slots per stage, stage layer split.
//  2. pp=2 with GPipe and with 1F1B (2 micro-batches) train 10 steps to the losses and final
//     parameters of one process on the same global batch (tolerance in test_hybrid_util.h);
//     pp=3 on a 4-layer model (stages of 2, 1, 1 layers; the tied wte gradient travels over the
//     first/last-stage group) likewise; step records carry each rank's bubble time.
//  3. Resume on pp=2 (1F1B) is bitwise; another layout is refused naming both.
#include <string>
#include <vector>

#include "engine/model/param_layout.h"
#include "engine/parallel/pipeline.h"
#include "tests/engine/test_hybrid_util.h"

using namespace hybrid_test;
using flotilla::describe_schedule;
using flotilla::pipeline_schedule;
using flotilla::pipeline_slots;

namespace {

void schedules() {
  CHECK(describe_schedule(pipeline_schedule("gpipe", 2, 0, 3)) == "F0 F1 F2 B0 B1 B2");
  CHECK(describe_schedule(pipeline_schedule("gpipe", 2, 1, 3)) == "F0 F1 F2 B0 B1 B2");
  // 1F1B, 4 stages, 6 micro-batches: stage s warms up with 3 - s forwards.
  CHECK(describe_schedule(pipeline_schedule("1f1b", 4, 0, 6)) == "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  CHECK(describe_schedule(pipeline_schedule("1f1b", 4, 2, 6)) == "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5");
  CHECK(describe_schedule(pipeline_schedule("1f1b", 4, 3, 6)) == "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
  // Fewer micro-batches than stages: warm-up is capped.
  CHECK(describe_schedule(pipeline_schedule("1f1b", 4, 0, 2)) == "F0 F1 B0 B1");
  CHECK(pipeline_slots("1f1b", 4, 0, 6) == 4 && pipeline_slots("1f1b", 4, 3, 6) == 1);
  CHECK(pipeline_slots("1f1b", 4, 0, 2) == 2 && pipeline_slots("gpipe", 4, 3, 6) == 6);
  CHECK_THROWS(pipeline_schedule("interleaved", 2, 0, 2), "gpipe, 1f1b");
  CHECK(flotilla::stage_layer_range(5, 3, 0) == std::make_pair(0, 2));
  CHECK(flotilla::stage_layer_range(5, 3, 1) == std::make_pair(2, 4));
  CHECK(flotilla::stage_layer_range(5, 3, 2) == std::make_pair(4, 5));
}

}  // namespace

int main() {
  schedules();

  const std::string root = fresh_dir("pp_equivalence");
  const Run single = train(root, "single", 1, config_text(2, ""));
  CHECK_MSG(single.code == 0 && single.losses.size() == 10, "%s", single.output.c_str());

  const Run gpipe =
      train(root, "gpipe", 2, config_text(2, "pp = 2\nmicro_batches = 2\nschedule = \"gpipe\""));
  expect_close(single, gpipe, "pp=2 gpipe");
  const Run one_f = train(root, "1f1b", 2, config_text(2, "pp = 2\nmicro_batches = 2\nschedule = \"1f1b\""));
  expect_close(single, one_f, "pp=2 1f1b");

  // Step records: every rank's bubble, and the first stage waits on the second at least once.
  double bubble = 0;
  size_t ranks = 0;
  for (const auto& r : read_metrics(root + "/1f1b"))
    if (r["type"] == "step" && r.contains("ranks")) {
      ranks = r["ranks"].size();
      for (const auto& q : r["ranks"]) bubble += q.value("bubble", 0.0);
      CHECK(r["time_ms"].contains("bubble"));
    }
  CHECK_MSG(ranks == 2 && bubble > 0, "ranks %zu, total bubble %.3f ms", ranks, bubble);

  // Three stages over four layers (2, 1, 1): the middle stage holds neither embedding nor head.
  const Run single4 = train(root, "single4", 1, config_text(4, ""));
  const Run pp3 = train(root, "pp3", 3, config_text(4, "pp = 3\nmicro_batches = 2"));
  expect_close(single4, pp3, "pp=3 1f1b (4 layers)");

  // Resume on pp=2 1F1B: 5 steps, new processes, 5 more == 10 straight, bit for bit.
  const std::string cfg = config_text(2, "pp = 2\nmicro_batches = 2\nschedule = \"1f1b\"");
  const Run a = train(root, "1f1b-resume", 2, cfg, {"--stop-after", "5"});
  CHECK_MSG(a.code == 0 && !a.losses.empty() && a.losses.rbegin()->first == 5, "%s", a.output.c_str());
  const Run b = train(root, "1f1b-resume", 2, cfg);
  CHECK_MSG(bitwise_equal(one_f, b), "pp=2 resume is not bitwise equal to the straight run");

  // Another layout on the same run directory resumes (re-cut, issue 32), naming both.
  const Run other = train(root, "1f1b-resume", 2, config_text(2, "tp = 2", 12));
  CHECK_MSG(other.code == 0, "%s", other.output.c_str());
  CHECK_MSG(
      contains(other.output, "saved with layout dp=1 x tp=1 x pp=2, this run requests dp=1 x tp=2 x pp=1"),
      "%s", other.output.c_str());
  return summary("pp_equivalence");
}
