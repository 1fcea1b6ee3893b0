// plan --recommend: every listed layout is valid, fits the device, keeps the global batch, and the
// list is sorted by predicted step time; a model that only fits when sharded is steered to ZeRO;
// nothing fitting gives an empty list with advice; unrunnable layouts are marked.
#include "check.h"
#include "engine/config/config_validate.h"
#include "engine/plan/recommend.h"
#include "engine/train/device_model.h"
#include "worker_run.h"

using namespace flotilla;

int main() {
  RunConfig base;
  base.model.preset = "gpt2-1.5b";
  base.model.n_layer = 48;
  base.model.n_head = 25;
  base.model.n_embd = 1600;
  base.run.device = "cuda";
  base.train.dtype = "bf16";
  base.train.micro_batch = 8;
  base.train.seq_len = 1024;
  DeviceProfile h100;
  CHECK(find_gpu_profile("h100-sxm", "bf16", &h100));
  const int64_t global = tokens_per_step(base);

  const auto layouts = recommend_layouts(base, 4, h100);
  CHECK(!layouts.empty());
  for (size_t i = 0; i < layouts.size(); ++i) {
    const auto& c = layouts[i];
    CHECK(validate(c.config, 4).empty());
    CHECK(c.plan.fits && c.plan.peak().total() <= h100.mem_bytes);
    CHECK(tokens_per_step(c.config) == global);
    CHECK(c.config.parallel.dp * c.config.parallel.tp * c.config.parallel.pp == 4);
    // Marked exactly as `train` would refuse it on this device (on CUDA: pipeline stages, ZeRO-2).
    CHECK(c.runnable == device_training_problems(c.config).empty());
    CHECK(c.runnable || !c.note.empty());
    if (i > 0) CHECK(layouts[i - 1].plan.step_s <= c.plan.step_s);
  }

  // On 24 GiB devices the 1.5B model (fp32 master weights + Adam ~ 24 GB) fits only with sharding.
  DeviceProfile small = h100;
  small.mem_bytes = 24ull << 30;
  const auto sharded = recommend_layouts(base, 4, small);
  CHECK(!sharded.empty());
  for (const auto& c : sharded) CHECK(c.config.parallel.zero > 0 || c.config.parallel.tp > 1 || c.config.parallel.pp > 1);

  // Nothing fits on a 1 GiB device: empty, and the text says what to do.
  DeviceProfile tiny = h100;
  tiny.mem_bytes = 1ull << 30;
  const auto none = recommend_layouts(base, 2, tiny);
  CHECK(none.empty());
  CHECK(recommendations_to_text(none, 2, tiny, 10).find("no layout fits") != std::string::npos);

  // The command line.
  auto r = flotilla_test::run_worker({"plan", "--set", "model.preset=gpt2-124m", "--recommend", "--world", "2",
                                      "--json"});
  CHECK_MSG(r.exit_code == 0, "%s", r.output.c_str());
  const auto j = nlohmann::json::parse(r.output, nullptr, false);
  CHECK(!j.is_discarded() && j["count"].get<int>() > 0 && j["layouts"][0]["runnable"].is_boolean());
  return flotilla_test::summary("plan_recommend");
}
