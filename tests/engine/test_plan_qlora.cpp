// The planner under QLoRA (lora.base_quant = "nf4"): the 4-bit base's bytes per module worked out
// by hand from the NF4 format (engine/core/nf4.h: 4 bits per element, per 64-block one 8-bit absmax
// code plus one fp32 per 256 blocks and the offset, or one fp32 absmax without double quantisation),
// per tensor-parallel rank (each its slice, the module's group absmaxes on every rank) and pipeline
// stage; the embedding, norms and head left in the storage dtype; FLOPs equal to LoRA's; the report
// naming the 4-bit base; and Recommend weighing QLoRA beside full fine-tuning and LoRA, with the
// one-line summary of what each method needs of the GPUs the planner knows.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "check.h"
#include "engine/config/config_io.h"
#include "engine/config/config_validate.h"
#include "engine/plan/planner.h"
#include "engine/plan/recommend.h"
#include "worker_run.h"

using namespace flotilla;

namespace {

RunConfig cfg(const std::vector<std::string>& overrides, int world = 0) {
  RunConfig c;
  apply_overrides(c, overrides);
  validate_or_throw(c, world, ValidateFor::kPlan);
  return c;
}

DeviceProfile device(uint64_t mem = 1ull << 40) { return DeviceProfile{"test", 1e14, mem, 1e11}; }

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A small Llama: 2 layers, width 128, 4 heads of 32 (2 KV heads: k and v are 128 -> 64), FFN 256.
std::vector<std::string> small(std::vector<std::string> more = {}) {
  std::vector<std::string> o = {"model.arch=llama",     "model.n_layer=2",       "model.n_embd=128",
                                "model.n_head=4",       "model.n_kv_head=2",     "model.ffn_dim=256",
                                "model.vocab_size=512", "model.max_seq_len=128", "train.seq_len=64",
                                "train.micro_batch=2",  "lora.enabled=true",     "lora.rank=4"};
  o.insert(o.end(), more.begin(), more.end());
  return o;
}

// One module's bytes by hand.
void test_module_bytes() {
  // SmolLM2-135M's down_proj (576 x 1536): 884,736 codes in 442,368 bytes, 13,824 blocks, 54 groups.
  CHECK(nf4_module_bytes(576, 1536, 1, false, true) == 442368 + 13824 + 54 * 4 + 4);
  CHECK(nf4_module_bytes(576, 1536, 1, false, false) == 442368 + 13824 * 4);
  // tp 2, row-parallel (its input columns split): each rank 576 x 768, its own 6,912 codes, but the
  // module's 54 group absmaxes and its offset whole.
  CHECK(nf4_module_bytes(576, 1536, 2, false, true) == 221184 + 6912 + 54 * 4 + 4);
  // Column-parallel (output rows split) gives the same bytes for this shape.
  CHECK(nf4_module_bytes(1536, 576, 2, true, true) == 221184 + 6912 + 54 * 4 + 4);
  CHECK(nf4_module_bytes(576, 1536, 2, false, false) == 221184 + 6912 * 4);
  // A flat tensor whose last block is short (300 elements: 150 bytes, 5 blocks, 1 group).
  CHECK(nf4_module_bytes(3, 100, 1, true, true) == 150 + 5 + 4 + 4);
  CHECK(nf4_module_bytes(3, 100, 1, true, false) == 150 + 5 * 4);
  // Bits per parameter: 4 + 8/64 + 32/(64 x 256) (+ the offsets) with double quantisation, 4 + 32/64 without.
  const ModelDims d8 = dims_from_config(cfg({"model.preset=llama3.1-8b", "lora.enabled=true"}).model);
  CHECK_NEAR(nf4_bits_per_parameter(d8, true), 4.0 + 0.125 + 32.0 / (64 * 256), 1e-5);
  CHECK_NEAR(nf4_bits_per_parameter(d8, false), 4.5, 1e-12);
}

// The memory of a small QLoRA model by hand: per layer the seven projections (q 128x128, k and v
// 64x128, o 128x128, gate and up 256x128, down 128x256) hold 147,456 parameters in
// 8,456 + 4,232 + 4,232 + 8,456 + 3 x 16,908 = 76,100 bytes (gate: 16,384 packed + 512 codes +
// 2 groups x 4 + 4); everything else stays fp32 on the CPU.
void test_memory_by_hand() {
  const RunConfig q = cfg(small({"lora.base_quant=nf4"}));
  const RunConfig l = cfg(small());
  const Plan pq = make_plan(q, device()), pl = make_plan(l, device());
  const MemoryBreakdown &mq = pq.peak(), &ml = pl.peak();
  const uint64_t proj = 147456, bytes = 76100;
  CHECK(nf4_block_bytes(pq.dims, 1, true).params == proj && nf4_block_bytes(pq.dims, 1, true).bytes == bytes);
  CHECK(mq.nf4_params == 2 * proj && mq.frozen_nf4 == 2 * bytes);
  CHECK_MSG(mq.frozen_weights == (pq.params.allocated - 2 * proj) * 4 + 2 * bytes, "frozen %llu",
            static_cast<unsigned long long>(mq.frozen_weights));
  CHECK(ml.frozen_weights == pl.params.allocated * 4);
  CHECK(ml.frozen_weights - mq.frozen_weights == 2 * (proj * 4 - bytes));
  CHECK_NEAR(pq.nf4_bits, 8.0 * bytes / proj, 1e-12);
  // The adapters, their state and the activations are LoRA's; the workspace adds the NF4 kernels'
  // per-thread 1 MiB tiles (engine/cpu/nf4_matmul.cpp).
  CHECK(mq.weights == ml.weights && mq.adam_m == ml.adam_m && mq.gradients == ml.gradients);
  CHECK(mq.activations == ml.activations);
  PlanOptions three;
  three.cpu_threads = 3;
  const Plan p3 = make_plan(q, device(), three);
  CHECK(p3.peak().nf4_scratch == 3ull << 20 && p3.peak().workspace == ml.workspace + (3ull << 20));
  // CPU bf16 also keeps the bf16 copy of the widest call's activation operand: N x 256 (gate/up's out).
  const Plan pb = make_plan(cfg(small({"lora.base_quant=nf4", "train.dtype=bf16"})), device(), three);
  CHECK(pb.peak().nf4_scratch == (6ull << 20) + 2ull * 64 * 256 * 2);  // 2 MiB bf16 tiles
  // A GPU run has no host tiles.
  const Plan pg = make_plan(cfg(small({"lora.base_quant=nf4", "run.device=cuda"})), device(), three);
  CHECK(pg.peak().nf4_scratch == 0);
  // Loading the base peaks at the model's state plus the loader's whole-model fp32 tensors besides
  // the projections, its quantised modules and the largest projection in fp32 (gate/up/down:
  // 128 x 256) in flight; the plan's total is the higher of that and training's peak.
  const auto check_load = [&](const Plan& p, bool above) {
    const MemoryBreakdown& m = p.peak();
    const uint64_t dense = p.params.allocated - 2 * proj;
    const uint64_t state = m.frozen_weights + m.weights + m.gradients + m.adam_m + m.adam_v + m.runtime;
    const uint64_t load_peak = state + dense * 4 + 2 * bytes + 128 * 256 * 4;
    const uint64_t steady = state + m.activations + m.workspace;
    CHECK_MSG(m.total() == std::max(load_peak, steady) && (m.loading > 0) == above,
              "loading %llu, total %llu, by hand %llu / %llu", static_cast<unsigned long long>(m.loading),
              static_cast<unsigned long long>(m.total()), static_cast<unsigned long long>(load_peak),
              static_cast<unsigned long long>(steady));
  };
  check_load(pq, false);  // 2 x 64 tokens: training peaks higher
  check_load(make_plan(cfg(small({"lora.base_quant=nf4", "train.micro_batch=1", "train.seq_len=8",
                                  "model.vocab_size=32768"})),
                       device()),
             true);
  CHECK(ml.loading == 0);
  // Without double quantisation: an fp32 absmax per 64-block.
  const Plan p4 = make_plan(cfg(small({"lora.base_quant=nf4", "lora.double_quant=false"})), device());
  const uint64_t single = 2 * (8192 + 256 * 4) + 2 * (4096 + 128 * 4) + 3 * (16384 + 512 * 4);
  CHECK(p4.peak().frozen_nf4 == 2 * single);
  CHECK_NEAR(p4.nf4_bits, 4.5, 1e-12);

  // FLOPs stay LoRA's (4N + 6 N_lora + attention): dequantising is not model work.
  CHECK(pq.flops.palm == pl.flops.palm && pq.flops.llmc == pl.flops.llmc);
  CHECK(pq.stages[0].flops == pl.stages[0].flops);

  // tp 2: each rank its half of every projection's codes, every module's group absmaxes and offset.
  const Plan t2 = make_plan(cfg(small({"lora.base_quant=nf4", "parallel.tp=2"}), 2), device());
  // Whole on each rank, per module (groups + offset) x 4 bytes: q, k, v, o one group, gate, up, down two.
  const uint64_t whole = 4 * (4 * (1 + 1) + 3 * (2 + 1));
  const uint64_t half = (bytes - whole) / 2 + whole;
  CHECK_MSG(t2.peak().frozen_nf4 == 2 * half, "tp 2: %llu, by hand %llu",
            static_cast<unsigned long long>(t2.peak().frozen_nf4), static_cast<unsigned long long>(2 * half));
  CHECK(t2.peak().nf4_params == proj);  // two layers of half the projections
  // pp 2: one layer a stage.
  const Plan p2 = make_plan(cfg(small({"lora.base_quant=nf4", "parallel.pp=2", "parallel.micro_batches=2",
                                       "train.global_batch_tokens=256"}),
                                2),
                            device());
  for (const StagePlan& st : p2.stages) CHECK(st.memory.frozen_nf4 == bytes && st.memory.nf4_params == proj);
}

// Llama-3.1-8B in bf16 on a GPU: the projections go from 2 bytes to 4.127 bits, the 2 x 525 M
// embedding and head parameters stay bf16.
void test_8b() {
  const std::vector<std::string> o = {"model.preset=llama3.1-8b", "run.device=cuda",     "train.dtype=bf16",
                                      "train.seq_len=2048",       "train.micro_batch=1", "lora.enabled=true"};
  std::vector<std::string> oq = o;
  oq.push_back("lora.base_quant=nf4");
  const Plan l = make_plan(cfg(o), device()), q = make_plan(cfg(oq), device());
  const uint64_t proj = 32ull * (4096 * 4096 * 2 + 2 * 4096 * 1024 + 3 * 4096 * 14336);
  CHECK(q.peak().nf4_params == proj);
  CHECK(q.peak().frozen_weights == (q.params.allocated - proj) * 2 + q.peak().frozen_nf4);
  CHECK_NEAR(static_cast<double>(q.peak().frozen_nf4), proj * (0.5 + 1.0 / 64 + 4.0 / (64 * 256)),
             32 * 7 * 4.0);
  CHECK(l.peak().frozen_weights - q.peak().frozen_weights > 9ull
                                                                << 30);  // 13.0 GiB of projections -> 3.4 GiB
  const std::string text = plan_to_text(q);
  CHECK_MSG(has(text, "4-bit NF4 base, 4.127 bits per parameter") && has(text, "= 4-bit NF4 base 3.4 GiB") &&
                has(text, "(QLoRA: master weights"),
            "%s", text.c_str());
  const auto j = nlohmann::json::parse(plan_to_json(q));
  CHECK(j["lora"]["base_quant"] == "nf4" && j["lora"]["base"] == "4-bit NF4 base" &&
        j["lora"]["double_quant"]);
  CHECK_NEAR(j["lora"]["base_bits_per_parameter"].get<double>(), q.nf4_bits, 1e-12);
  CHECK(j["memory_per_device"]["frozen_nf4"] == q.peak().frozen_nf4);
  CHECK(j["flops_per_token"]["palm"]["formula"] == "4N + 6N_lora + 12*L*C*T");
  const auto jl = nlohmann::json::parse(plan_to_json(l));
  CHECK(jl["lora"]["base_quant"] == "none" && jl["lora"]["base"] == "bf16 base" &&
        jl["lora"]["base_bits_per_parameter"] == 16.0);
}

// 8B-shaped dims at seq_len 4096 on one 24 GiB card: LoRA's 15 GiB bf16 base plus activations do
// not fit, QLoRA's 4-bit base does, by the planner's own figures; 70B-shaped dims (80 layers, width
// 8192, 64 heads, 8 KV, FFN 28672) fit four 24 GiB cards only as QLoRA.
void test_recommend() {
  DeviceProfile a10;
  CHECK(find_gpu_profile("a10-24gb", "bf16", &a10));
  const std::vector<std::string> o = {"model.preset=llama3.1-8b", "run.device=cuda",     "train.dtype=bf16",
                                      "train.seq_len=4096",       "train.micro_batch=1", "lora.enabled=true"};
  RunConfig base = cfg(o);
  FineTuneAdvice advice;
  const auto one = recommend_layouts(base, 1, a10, {}, &advice);
  CHECK(advice.fine_tune && advice.prefer_lora && !advice.prefer_qlora);
  CHECK(!advice.full_fits && !advice.lora_fits && advice.qlora_fits);
  // The arithmetic: LoRA's plan needs more than the card, QLoRA's with its margin (none on a GPU) less.
  RunConfig lora_cfg = base, qlora_cfg = base;
  qlora_cfg.lora.base_quant = "nf4";
  const Plan lp = make_plan(lora_cfg, a10), qp = make_plan(qlora_cfg, a10);
  CHECK(lp.needed_bytes() > a10.mem_bytes && !lp.fits);
  CHECK(qp.needed_bytes() <= a10.mem_bytes && qp.fits);
  CHECK(lp.needed_bytes() - qp.needed_bytes() == lp.peak().frozen_weights - qp.peak().frozen_weights);
  CHECK(!one.empty());
  for (const auto& c : one) {
    CHECK(c.config.lora.enabled && c.config.lora.base_quant == "nf4" && c.plan.lora.nf4 && c.plan.fits);
    CHECK_MSG(
        has(c.note, "LoRA does not fit: ") && has(c.note, "QLoRA trains 0.52% of the parameters and fits"),
        "%s", c.note.c_str());
  }
  CHECK_MSG(has(advice.lora, "but does not fit") && has(advice.qlora, "4-bit NF4 base at 4.127 bits") &&
                has(advice.qlora, "and fits: "),
            "%s\n%s", advice.lora.c_str(), advice.qlora.c_str());
  const std::string text = recommendations_to_text(one, 1, a10, 5, advice);
  CHECK_MSG(has(text, "QLoRA r16") && has(text, "--set lora.base_quant=nf4"), "%s", text.c_str());
  const auto j = nlohmann::json::parse(recommendations_to_json(one, 5, advice));
  CHECK(j["layouts"][0]["method"] == "qlora" && j["layouts"][0]["lora"]["base_quant"] == "nf4");
  CHECK(j["fine_tune"]["qlora_fits"] == true && j["fine_tune"]["lora_fits"] == false);

  // The needs line, checked against the plans it summarises: each method's card count and card fit,
  // and no fewer cards of any profile, nor the same count of a smaller card, fit.
  std::vector<std::pair<std::string, DeviceProfile>> cards;
  for (const auto& n : gpu_profile_names()) {
    DeviceProfile p;
    CHECK(find_gpu_profile(n, "bf16", &p));
    cards.emplace_back(n, p);
  }
  const auto fits_on = [&](const RunConfig& c, FineTuneMethod m, int world, const DeviceProfile& card) {
    RunConfig x = c;
    x.parallel = ParallelSection{};
    x.train.global_batch_tokens = int64_t{x.train.micro_batch} * x.train.seq_len * 8;
    FineTuneAdvice a;
    (void)recommend_layouts(x, world, card, {}, &a);
    return m == FineTuneMethod::kFull ? a.full_fits : m == FineTuneMethod::kLora ? a.lora_fits : a.qlora_fits;
  };
  const auto check_needs = [&](const RunConfig& c, const FineTuneNeeds& n) {
    CHECK(n.needs.size() == 3);
    for (const MethodNeed& need : n.needs) {
      if (need.count == 0) {
        for (const auto& card : cards) CHECK(!fits_on(c, need.method, 8, card.second));
        continue;
      }
      DeviceProfile chosen;
      CHECK(find_gpu_profile(need.profile, "bf16", &chosen));
      CHECK_MSG(fits_on(c, need.method, need.count, chosen), "%s on %d x %s", method_name(need.method),
                need.count, need.profile.c_str());
      for (const auto& [name, card] : cards) {
        for (int fewer : {1, 2, 4})
          if (fewer < need.count) CHECK(!fits_on(c, need.method, fewer, card));
        if (card.mem_bytes < chosen.mem_bytes) CHECK(!fits_on(c, need.method, need.count, card));
      }
    }
  };
  const FineTuneNeeds n8 = fine_tune_needs(base);
  check_needs(base, n8);
  CHECK(n8.needs[2].count == 1 && n8.needs[2].mem_bytes == 24ull << 30);  // QLoRA: one 24 GB card
  CHECK(n8.needs[1].mem_bytes > 24ull << 30);                             // LoRA: a bigger one
  CHECK_MSG(n8.text == "llama3.1-8b: full fine-tune needs " + n8.needs[0].text + "; LoRA " +
                           n8.needs[1].text +
                           "; QLoRA 1 \u00d7 24 GB (on the GPUs the planner knows, bf16, micro-batch 1 x "
                           "4096 tokens, recompute off)",
            "%s", n8.text.c_str());
  CHECK(advice.needs == n8.text);

  // 70B-shaped: four 24 GiB cards hold QLoRA (tensor-parallel 4: a quarter of a 35 GiB base each),
  // not LoRA.
  std::vector<std::string> o70 = o;
  for (const char* k :
       {"model.n_layer=80", "model.n_embd=8192", "model.n_head=64", "model.n_kv_head=8",
        "model.ffn_dim=28672", "model.head_dim=128", "train.seq_len=2048", "train.recompute=true"})
    o70.emplace_back(k);
  const RunConfig b70 = cfg(o70);
  const auto four = recommend_layouts(b70, 4, a10, {}, &advice);
  CHECK(advice.qlora_fits && !advice.lora_fits && !advice.full_fits && !four.empty());
  CHECK(four.front().plan.lora.nf4 && four.front().plan.tp * four.front().plan.pp > 1);
  check_needs(b70, fine_tune_needs(b70));
}

// The worker's plan and plan --recommend name the 4-bit base.
void test_cli() {
  const std::vector<std::string> args = {"plan",
                                         "--set",
                                         "model.preset=llama3.1-8b",
                                         "--set",
                                         "lora.enabled=true",
                                         "--set",
                                         "lora.base_quant=nf4",
                                         "--set",
                                         "run.device=cuda",
                                         "--set",
                                         "train.dtype=bf16",
                                         "--set",
                                         "train.seq_len=4096",
                                         "--set",
                                         "train.micro_batch=1",
                                         "--device",
                                         "a10-24gb",
                                         "--no-calibrate"};
  auto r = flotilla_test::run_worker(args);
  CHECK_MSG(r.exit_code == 0 && has(r.output, "4-bit NF4 base") && has(r.output, "(fits)"), "%s",
            r.output.c_str());
  std::vector<std::string> rec = args;
  rec.push_back("--recommend");
  r = flotilla_test::run_worker(rec);
  CHECK_MSG(r.exit_code == 0 && has(r.output, "llama3.1-8b: full fine-tune needs") &&
                has(r.output, "; QLoRA 1 \u00d7 24 GB") && has(r.output, "QLoRA first"),
            "%s", r.output.c_str());
}

}  // namespace

int main() {
  test_module_bytes();
  test_memory_by_hand();
  test_8b();
  test_recommend();
  test_cli();
  return flotilla_test::summary("plan_qlora");
}
