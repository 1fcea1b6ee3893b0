// The planner under LoRA (lora.enabled): trainable counts of the 7-8B presets against r x (in + out)
// per target worked out by hand; memory by component (a frozen base in the storage dtype, split by
// TP like the full model's weights, and only the adapters' gradients, masters and AdamW state, which
// ZeRO shards); the activation bytes equal to what a LoRA Model allocates; FLOPs 4N + 6 N_lora
// against full training's 6N; data-parallel traffic of the adapters only; plan --recommend choosing
// LoRA when full fine-tuning does not fit and saying why; and the same through the worker's CLI.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "check.h"
#include "engine/config/config_io.h"
#include "engine/config/config_validate.h"
#include "engine/model/model.h"
#include "engine/plan/planner.h"
#include "engine/plan/recommend.h"
#include "worker_run.h"

using namespace flotilla;

namespace {

RunConfig cfg(const std::vector<std::string>& overrides) {
  RunConfig c;
  apply_overrides(c, overrides);
  validate_or_throw(c, 0, ValidateFor::kPlan);
  return c;
}

// A bf16 GPU fine-tune of a preset at seq_len 2048, LoRA r 16 on every projection unless overridden.
RunConfig gpu_cfg(const std::string& preset, std::vector<std::string> more = {}) {
  std::vector<std::string> o = {"model.preset=" + preset, "run.device=cuda",     "train.dtype=bf16",
                                "train.seq_len=2048",     "train.micro_batch=1", "lora.enabled=true"};
  o.insert(o.end(), more.begin(), more.end());
  return cfg(o);
}

DeviceProfile device(uint64_t mem = 1ull << 40) { return DeviceProfile{"test", 1e14, mem, 1e11}; }

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Trainable parameters by hand: L x r x sum over targets of (in + out), the projections' widths
// being q C->H*d, k and v C->KV*d, o H*d->C, gate and up C->F, down F->C.
void test_trainable_counts() {
  const struct {
    const char* preset;
    uint64_t total;  // the released checkpoint's parameter count
    uint64_t L, C, Q, KV, F;
  } models[] = {{"llama3.1-8b", 8030261248ull, 32, 4096, 4096, 1024, 14336},
                {"qwen2.5-7b", 7615616512ull, 28, 3584, 3584, 512, 18944},
                {"qwen3-8b", 8190735360ull, 36, 4096, 4096, 1024, 12288}};
  for (const auto& m : models) {
    const RunConfig c = gpu_cfg(m.preset);
    const ModelDims d = dims_from_config(c.model);
    const uint64_t r = 16;
    const uint64_t per_layer =
        r * ((m.C + m.Q) + 2 * (m.C + m.KV) + (m.Q + m.C) + 2 * (m.C + m.F) + (m.F + m.C));
    const ParamCounts p = count_parameters(d, lora_spec(c));
    CHECK_MSG(p.total == m.total, "%s: %llu parameters, the released model has %llu", m.preset,
              static_cast<unsigned long long>(p.total), static_cast<unsigned long long>(m.total));
    CHECK_MSG(p.trainable == m.L * per_layer, "%s: %llu trainable, by hand %llu", m.preset,
              static_cast<unsigned long long>(p.trainable), static_cast<unsigned long long>(m.L * per_layer));
    CHECK(count_parameters(d).trainable == p.total);  // full training trains everything
    const Plan plan = make_plan(c, device());
    CHECK(plan.params.trainable == p.trainable && plan.lora.enabled());
    CHECK(plan.stages[0].trainable_params == p.trainable);
  }
  // PEFT's figure for Llama-3.1-8B at r 16 on every projection: 41,943,040 (0.52%), as the report says.
  const Plan llama = make_plan(gpu_cfg("llama3.1-8b"), device());
  CHECK(llama.params.trainable == 41943040ull);
  const std::string text = plan_to_text(llama);
  CHECK_MSG(has(text, "trainable parameters: 41,943,040 (0.52% of 8,030,261,248)"), "%s", text.c_str());
  // Fewer targets, another rank: Qwen2.5-7B r 8 on q and v = 28 x 8 x ((3584 + 3584) + (3584 + 512)).
  const RunConfig qv = gpu_cfg("qwen2.5-7b", {"lora.rank=8", "lora.targets=q_proj,v_proj"});
  CHECK(count_parameters(dims_from_config(qv.model), lora_spec(qv)).trainable == 28ull * 8 * (7168 + 4096));
}

// Memory per component: the base frozen in bf16, every optimizer-side state only the adapters'.
void test_memory_components() {
  const RunConfig c = gpu_cfg("llama3.1-8b");
  const Plan p = make_plan(c, device());
  const MemoryBreakdown& m = p.peak();
  const uint64_t base = p.params.allocated, n = p.params.trainable;
  CHECK(m.frozen_weights == base * 2);  // bf16 storage
  CHECK(m.weights == n * 2 && m.gradients == n * 2);
  CHECK(m.master_weights == n * 4 && m.adam_m == n * 4 && m.adam_v == n * 4);
  CHECK(m.total() == m.frozen_weights + m.weights + m.master_weights + m.gradients + m.adam_m + m.adam_v +
                         m.activations + m.workspace + m.runtime);
  // Full fine-tuning of the same run: the base is the trained weights, with gradients and state.
  RunConfig full_cfg = c;
  full_cfg.lora.enabled = false;
  const Plan full = make_plan(full_cfg, device());
  CHECK(full.peak().frozen_weights == 0 && full.peak().weights == base * 2 &&
        full.peak().gradients == base * 2);
  CHECK(full.peak().adam_m == base * 4 && full.params.trainable == full.params.total);
  CHECK(m.total() < full.peak().total() / 3);

  // ZeRO shards the adapters' state over dp, never the base.
  for (int zero : {0, 1, 2}) {
    RunConfig z = c;
    z.parallel.dp = 4;
    z.parallel.zero = zero;
    validate_or_throw(z, 4, ValidateFor::kPlan);
    const Plan zp = make_plan(z, device());
    const MemoryBreakdown& zm = zp.peak();
    const uint64_t shard = (n + 3) / 4;
    CHECK(zm.frozen_weights == m.frozen_weights && zm.weights == m.weights);
    CHECK(zm.adam_m == (zero >= 1 ? shard : n) * 4 && zm.master_weights == (zero >= 1 ? shard : n) * 4);
    CHECK(zm.gradients == (zero >= 2 ? shard : n) * 2);
    // Data parallelism moves the adapters' gradients: an all-reduce of 2 x n bytes, or (ZeRO)
    // a reduce-scatter of them plus an all-gather of the adapters.
    const double expected = zero == 0 ? allreduce_bytes(2.0 * n, 4) : 2 * reduce_scatter_bytes(2.0 * n, 4);
    CHECK_NEAR(zp.stages[0].comm_dp_bytes, expected, 1.0);
  }

  // Tensor parallelism splits the frozen base exactly as it splits the full model's weights, and
  // each adapter like its projection: column targets (q, k, v, gate, up) keep A and split B's rows,
  // row targets (o, down) split A's columns and keep B.
  RunConfig t = c;
  t.parallel.tp = 2;
  validate_or_throw(t, 2, ValidateFor::kPlan);
  RunConfig tfull = t;
  tfull.lora.enabled = false;
  const Plan tp = make_plan(t, device());
  CHECK(tp.peak().frozen_weights == make_plan(tfull, device()).peak().weights);
  CHECK(tp.peak().frozen_weights < m.frozen_weights && tp.peak().frozen_weights > m.frozen_weights / 2);
  const uint64_t C = 4096, Q = 4096, KV = 1024, F = 14336, r = 16;
  const uint64_t column = r * (C + Q / 2) + 2 * r * (C + KV / 2) + 2 * r * (C + F / 2);
  const uint64_t row = r * (Q / 2 + C) + r * (F / 2 + C);
  CHECK(tp.stages[0].trainable_params == 32 * (column + row));
  CHECK(tp.peak().adam_m == tp.stages[0].trainable_params * 4);

  // CPU fp32: everything in fp32, no master copy.
  const RunConfig cpu = cfg({"model.preset=llama-tiny", "lora.enabled=true", "lora.rank=4"});
  const Plan cp = make_plan(cpu, device());
  CHECK(cp.peak().frozen_weights == cp.params.allocated * 4 && cp.peak().master_weights == 0);
  CHECK(cp.peak().gradients == cp.params.trainable * 4);
}

// The planner's LoRA activations are the model's own: on one CPU rank activations + workspace are
// what a LoRA Model allocates (recompute off and on), and under tensor parallelism what LoRA adds
// is what it adds to the model's shard.
void test_activations_match_model() {
  const int B = 2, T = 64;
  for (bool recompute : {false, true}) {
    std::vector<std::string> o = {"model.preset=llama-tiny",
                                  "model.vocab_size=512",
                                  "model.max_seq_len=128",
                                  "train.micro_batch=2",
                                  "train.seq_len=64",
                                  "lora.enabled=true",
                                  "lora.rank=4",
                                  "lora.dropout=0.1",
                                  std::string("train.recompute=") + (recompute ? "true" : "false")};
    const RunConfig c = cfg(o);
    const ModelDims d = dims_from_config(c.model);
    ModelOptions lo;
    lo.lora = lora_spec(c);
    Model model(d, ModelShard{}, nullptr, lo);
    model.set_recompute(recompute);
    const Plan p = make_plan(c, device());
    const uint64_t planned = p.peak().activations + p.peak().workspace;
    CHECK_MSG(planned == model.activation_bytes_for(B, T), "recompute %d: planner %llu, LoRA model %zu",
              recompute, static_cast<unsigned long long>(planned), model.activation_bytes_for(B, T));

    // Tensor parallelism: the LoRA share at tp = 2 is exactly the model shard's.
    o.push_back("parallel.tp=2");
    const RunConfig ct = cfg(o);
    RunConfig ct_full = ct;
    ct_full.lora.enabled = false;
    const ModelShard shard = make_shard(d, 2, 0, 1, 0);
    Model lora_shard(d, shard, nullptr, lo);
    Model full_shard(d, shard, nullptr, ModelOptions{});
    lora_shard.set_recompute(recompute);
    full_shard.set_recompute(recompute);
    const Plan pa = make_plan(ct, device()), pb = make_plan(ct_full, device());
    const MemoryBreakdown &a = pa.peak(), &b = pb.peak();
    const int64_t plan_delta =
        static_cast<int64_t>(a.activations + a.workspace) - static_cast<int64_t>(b.activations + b.workspace);
    const int64_t model_delta = static_cast<int64_t>(lora_shard.activation_bytes_for(B, T)) -
                                static_cast<int64_t>(full_shard.activation_bytes_for(B, T));
    CHECK_MSG(plan_delta == model_delta && model_delta > 0, "tp 2, recompute %d: planner +%lld, model +%lld",
              recompute, static_cast<long long>(plan_delta), static_cast<long long>(model_delta));
  }
}

// FLOPs: 4N + 6 N_lora + 12 L Q T per token, the stages' FLOPs summing to the step's, and the
// recomputation surcharge growing by the adapters the rebuild re-runs.
void test_flops() {
  const RunConfig c = gpu_cfg("llama3.1-8b");
  const ModelDims d = dims_from_config(c.model);
  const Plan p = make_plan(c, device());
  const double n = static_cast<double>(p.flops.n_palm), nl = static_cast<double>(p.params.trainable);
  const double attention = 12.0 * 32 * 4096 * 2048;
  CHECK(p.flops.palm == 4.0 * n + 6.0 * nl + attention);
  const FlopsPerToken full = flops_per_token(d, 2048);
  CHECK_NEAR(p.flops.palm / full.palm, (4.0 * n + 6.0 * nl + attention) / (6.0 * n + attention), 1e-12);
  CHECK(p.flops.palm / full.palm > 0.66 && p.flops.palm / full.palm < 0.72);
  CHECK_NEAR(p.flops_per_step, p.flops.palm * 2048, 1.0);
  // Split over two pipeline stages and two TP ranks, the ranks' FLOPs add up to the step's.
  RunConfig s = c;
  s.parallel.pp = 2;
  s.parallel.tp = 2;
  s.parallel.micro_batches = 2;
  s.train.global_batch_tokens = 4096;
  validate_or_throw(s, 4, ValidateFor::kPlan);
  const Plan sp = make_plan(s, device());
  double sum = 0;
  for (const auto& st : sp.stages) sum += st.flops * 2;
  CHECK_NEAR(sum / sp.flops_per_step, 1.0, 1e-12);
  // Recompute: the rebuild re-runs every adapter but down's B (r x C).
  const double extra = recompute_flops_per_token(d, 2048, lora_spec(c)) - recompute_flops_per_token(d, 2048);
  CHECK(extra == 2.0 * (1310720.0 - 16.0 * 4096));
}

// Recommend for a fine-tune: full fine-tuning of an 8B model does not fit one 24 GiB card, LoRA
// does; every candidate is LoRA, says so and carries the LoRA settings. With room for both, the
// method the config asks for comes first.
void test_recommend() {
  DeviceProfile a10;
  CHECK(find_gpu_profile("a10-24gb", "bf16", &a10));
  RunConfig base = gpu_cfg("llama3.1-8b", {"train.recompute=true"});
  base.lora.enabled = false;
  base.model.init_from = std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/hf/llama";  // a fine-tune
  FineTuneAdvice advice;
  const auto one = recommend_layouts(base, 1, a10, {}, &advice);
  CHECK(advice.fine_tune && !advice.prefer_lora && !advice.full_fits && advice.lora_fits);
  CHECK_MSG(has(advice.full, "full fine-tuning does not fit") && has(advice.full, "optimizer state"), "%s",
            advice.full.c_str());
  CHECK(!one.empty());
  for (const auto& c : one) {
    CHECK(c.config.lora.enabled && c.config.lora.rank == 16 && c.config.lora.targets == "all-linear");
    CHECK(c.plan.lora.enabled() && c.plan.fits);
    CHECK_MSG(has(c.note, "full fine-tuning does not fit: ") &&
                  has(c.note, "GiB of optimizer state per GPU") &&
                  has(c.note, "LoRA trains 0.52% of the parameters and fits with "),
              "%s", c.note.c_str());
  }
  const std::string text = recommendations_to_text(one, 1, a10, 5, advice);
  CHECK_MSG(has(text, "full fine-tuning does not fit") && has(text, "LoRA r16") &&
                has(text, "--set lora.enabled=true --set lora.rank=16 --set lora.targets=all-linear"),
            "%s", text.c_str());

  // Four 80 GiB GPUs fit both: full fine-tuning first (the config's method), then LoRA.
  DeviceProfile h100;
  CHECK(find_gpu_profile("h100-sxm", "bf16", &h100));
  base.train.micro_batch = 4;
  const auto four = recommend_layouts(base, 4, h100, {}, &advice);
  CHECK(advice.full_fits && advice.lora_fits && !four.empty());
  CHECK(!four.front().config.lora.enabled &&
        has(four.front().note, "full fine-tuning trains every parameter"));
  CHECK(four.back().config.lora.enabled && has(four.back().note, "full fine-tuning also fits"));
  for (size_t i = 1; i < four.size(); ++i)  // one method, then the other
    CHECK(four[i - 1].config.lora.enabled <= four[i].config.lora.enabled);
  // A LoRA config: LoRA first, with its own rank.
  RunConfig asked = base;
  asked.lora.enabled = true;
  asked.lora.rank = 8;
  const auto lora_first = recommend_layouts(asked, 4, h100, {}, &advice);
  CHECK(advice.prefer_lora && lora_first.front().config.lora.enabled &&
        lora_first.front().plan.lora.rank == 8);
  // Not a fine-tune: no method weighed, no LoRA candidate.
  RunConfig scratch = base;
  scratch.model.init_from.clear();
  for (const auto& c : recommend_layouts(scratch, 4, h100, {}, &advice)) CHECK(!c.config.lora.enabled);
  CHECK(!advice.fine_tune);
}

// The worker's plan: a LoRA run of a preset plans without weights (they are needed to train), and
// the JSON carries the trainable count, the frozen base and the LoRA formula.
void test_cli() {
  const std::vector<std::string> args = {"plan",
                                         "--set",
                                         "model.preset=llama3.1-8b",
                                         "--set",
                                         "lora.enabled=true",
                                         "--set",
                                         "run.device=cuda",
                                         "--set",
                                         "train.dtype=bf16",
                                         "--set",
                                         "train.seq_len=2048",
                                         "--set",
                                         "train.micro_batch=1",
                                         "--set",
                                         "train.recompute=true",
                                         "--device",
                                         "a10-24gb",
                                         "--no-calibrate"};
  auto r = flotilla_test::run_worker(args);
  CHECK_MSG(r.exit_code == 0 && has(r.output, "frozen base") && has(r.output, "(fits)") &&
                has(r.output, "trainable parameters: 41,943,040 (0.52% of 8,030,261,248)"),
            "%s", r.output.c_str());
  std::vector<std::string> json_args = args;
  json_args.push_back("--json");
  r = flotilla_test::run_worker(json_args);
  const auto j = nlohmann::json::parse(r.output, nullptr, false);
  CHECK_MSG(r.exit_code == 0 && !j.is_discarded(), "%s", r.output.c_str());
  if (j.is_discarded()) return;
  CHECK(j["parameters"]["trainable"] == 41943040ull && j["lora"]["enabled"] == true);
  CHECK(j["lora"]["rank"] == 16 &&
        j["lora"]["targets"] == "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj");
  CHECK(j["flops_per_token"]["palm"]["formula"] == "4N + 6N_lora + 12*L*C*T");
  const auto& m = j["memory_per_device"];
  CHECK(m["frozen_weights"] == 2 * 8030261248ull && m["gradients"] == 2 * 41943040ull);
  // Training still needs the weights: validate() for train refuses the same config.
  RunConfig c = gpu_cfg("llama3.1-8b");
  bool refused = false;
  for (const auto& p : validate(c)) refused = refused || has(p.message, "needs model.init_from");
  CHECK(refused);
}

}  // namespace

int main() {
  test_trainable_counts();
  test_memory_components();
  test_activations_match_model();
  test_flops();
  test_recommend();
  test_cli();
  return flotilla_test::summary("plan_lora");
}
