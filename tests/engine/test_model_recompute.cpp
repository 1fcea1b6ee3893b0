// Activation recomputation (train.recompute, issue 8): the same numbers with less memory.
//  1. In process, the tiny model (4 layers, width 256): 3 AdamW steps with recompute on and off
//     give bit-identical losses and parameters; the bytes the model allocates for activations
//     (Model::activation_bytes) are exactly activation_floats(..., recompute) x 4, and drop by
//     exactly what the planner predicts (activations + workspace, recompute off minus on).
//  2. Real ranks through `flotilla-worker launch` (4 layers, width 64, 3 steps): tp=2 and pp=2
//     (1F1B, 2 micro-batches, so stage 0 holds 2 activation slots sharing one block region) with
//     recompute on and off: bit-identical losses and final parameters; rank 0's "activation
//     memory" event drops by exactly the planner's prediction for its stage.
// Exact, not within a tolerance: the planner derives its figures from the model's own arena
// accounting, and every tensor size here is a multiple of the 16-float alignment.
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "engine/backend/registry.h"
#include "engine/config/config_io.h"
#include "engine/config/config_validate.h"
#include "engine/core/rng.h"
#include "engine/model/gpt.h"
#include "engine/plan/planner.h"
#include "engine/train/adamw.h"
#include "test_hybrid_util.h"

using namespace flotilla;
using namespace flotilla_test;

namespace {

constexpr int kB = 2, kT = 64;

RunConfig tiny_config(bool recompute) {
  RunConfig c;
  apply_overrides(c, {"model.preset=tiny", "model.vocab_size=512", "model.max_seq_len=64",
                      "train.micro_batch=" + std::to_string(kB), "train.seq_len=" + std::to_string(kT),
                      std::string("train.recompute=") + (recompute ? "true" : "false")});
  validate_or_throw(c);
  return c;
}

struct Trained {
  std::vector<float> losses, params;
  size_t activation_bytes = 0;
};

Trained train_in_process(bool recompute, int steps) {
  const ModelDims d = dims_from_config(tiny_config(recompute).model);
  Model model(d);
  model.set_recompute(recompute);
  CHECK(model.recompute() == recompute);
  model.init_random(11);
  AdamW opt(model.backend(), param_groups(model), 0, model.num_params());
  AdamWHyper h;
  h.lr = 1e-3f;
  Rng data(99);
  std::vector<int32_t> tok(kB * kT + 1);
  Trained r;
  for (int s = 1; s <= steps; ++s) {
    for (auto& x : tok) x = static_cast<int32_t>(data.below(static_cast<uint64_t>(d.vocab_size)));
    model.zero_grad();
    r.losses.push_back(model.forward(tok.data(), tok.data() + 1, kB, kT));
    model.backward(1.0f);
    const float norm = global_grad_norm(model.grads(), model.num_params());
    if (norm > 1.0f) scale_grads(model.grads(), model.num_params(), 1.0f / norm);
    opt.step(model.params(), model.grads(), h, s);
  }
  r.params.assign(model.params(), model.params() + model.num_params());
  r.activation_bytes = model.activation_bytes();
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && !a.empty() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// Planner: activations + workspace of `stage`, in bytes.
uint64_t planned_act(const RunConfig& c, int stage) {
  const Plan p = make_plan(c, DeviceProfile{"test", 1e12, 1ull << 40, 1e10});
  const MemoryBreakdown& m = p.stages[static_cast<size_t>(stage)].memory;
  return m.activations + m.workspace;
}

void in_process() {
  get_backend("cpu").set_threads(1);
  const Trained off = train_in_process(false, 3), on = train_in_process(true, 3);
  CHECK_MSG(same_bits(off.losses, on.losses), "losses differ with recompute: %.9g vs %.9g", off.losses.back(),
            on.losses.back());
  CHECK_MSG(same_bits(off.params, on.params), "parameters differ bitwise after 3 steps with recompute");
  CHECK(off.losses.size() == 3 && off.losses[2] != off.losses[0]);  // it trained

  const ModelDims d = dims_from_config(tiny_config(false).model);
  CHECK(off.activation_bytes == 4 * activation_floats(d, kB, kT, false));
  CHECK(on.activation_bytes == 4 * activation_floats(d, kB, kT, true));
  const uint64_t plan_off = planned_act(tiny_config(false), 0), plan_on = planned_act(tiny_config(true), 0);
  CHECK(plan_off == off.activation_bytes);
  std::printf("tiny B%d T%d: activation bytes off %zu, on %zu (drop %zu); planner drop %llu\n", kB, kT,
              off.activation_bytes, on.activation_bytes, off.activation_bytes - on.activation_bytes,
              static_cast<unsigned long long>(plan_off - plan_on));
  CHECK(on.activation_bytes < off.activation_bytes);
  CHECK(off.activation_bytes - on.activation_bytes == plan_off - plan_on);
}

// ---- real ranks ---------------------------------------------------------------------------------

std::string worker_config(const std::string& parallel, bool recompute) {
  std::string text = hybrid_test::config_text(4, parallel, 3);
  const size_t at = text.find("[train]\n") + 8;
  text.insert(at, std::string("recompute = ") + (recompute ? "true" : "false") + "\n");
  return text;
}

int64_t reported_activation_bytes(const std::string& run_dir) {
  for (const auto& r : read_metrics(run_dir))
    if (r["type"] == "event" && r.contains("activation_bytes"))
      return std::stoll(r["activation_bytes"].get<std::string>());
  return -1;
}

void ranks(const std::string& root, const std::string& name, const std::string& parallel) {
  const hybrid_test::Run off = hybrid_test::train(root, name + "-off", 2, worker_config(parallel, false));
  const hybrid_test::Run on = hybrid_test::train(root, name + "-on", 2, worker_config(parallel, true));
  CHECK_MSG(off.code == 0 && off.losses.size() == 3, "%s off: %s", name.c_str(), off.output.c_str());
  CHECK_MSG(on.code == 0 && on.losses.size() == 3, "%s on: %s", name.c_str(), on.output.c_str());
  CHECK_MSG(hybrid_test::bitwise_equal(off, on), "%s: recompute changed losses or parameters", name.c_str());

  const int64_t b_off = reported_activation_bytes(root + "/" + name + "-off");
  const int64_t b_on = reported_activation_bytes(root + "/" + name + "-on");
  const RunConfig c_off = parse_config_toml(worker_config(parallel, false), name);
  const RunConfig c_on = parse_config_toml(worker_config(parallel, true), name);
  const int64_t drop = static_cast<int64_t>(planned_act(c_off, 0)) - static_cast<int64_t>(planned_act(c_on, 0));
  std::printf("%s rank 0: activation bytes off %lld, on %lld (drop %lld); planner drop %lld\n", name.c_str(),
              static_cast<long long>(b_off), static_cast<long long>(b_on), static_cast<long long>(b_off - b_on),
              static_cast<long long>(drop));
  CHECK_MSG(b_off > 0 && b_on > 0 && b_on < b_off, "%s: no activation memory event or no drop", name.c_str());
  CHECK_MSG(b_off - b_on == drop, "%s: measured drop %lld, planned %lld", name.c_str(),
            static_cast<long long>(b_off - b_on), static_cast<long long>(drop));
}

}  // namespace

int main() {
  in_process();
  const std::string root = fresh_dir("model_recompute");
  ranks(root, "tp2", "tp = 2");
  ranks(root, "pp2", "pp = 2\nmicro_batches = 2");
  return summary("model_recompute");
}
