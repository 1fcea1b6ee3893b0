// Planner formulas against values computed by hand: GPT-2 124M parameter counts, both FLOP
// conventions, the pipeline bubble, collective volumes, ZeRO/TP/PP/bf16/recompute effects on
// memory, and the step-time arithmetic.
#include <cmath>
#include <string>
#include <vector>

#include "check.h"
#include "engine/config/config_io.h"
#include "engine/config/config_validate.h"
#include "engine/model/param_layout.h"
#include "engine/plan/planner.h"

using namespace flotilla;

namespace {

RunConfig cfg(const std::vector<std::string>& overrides) {
  RunConfig c;
  apply_overrides(c, overrides);
  validate_or_throw(c);
  return c;
}

DeviceProfile device(double flops = 1e12, double link = 1e10, uint64_t mem = 1ull << 40) {
  return DeviceProfile{"test", flops, mem, link};
}

uint64_t sum(const MemoryBreakdown& m) {
  return m.weights + m.master_weights + m.gradients + m.adam_m + m.adam_v + m.activations + m.workspace +
         m.runtime;
}

void test_gpt2_124m_counts() {
  const ModelDims d = dims_from_config(cfg({"model.preset=gpt2-124m"}).model);
  const ParamCounts p = count_parameters(d);
  CHECK(p.total == 124439808ull);
  CHECK(p.allocated == 124475904ull);                                       // wte padded 50257 -> 50304 rows
  CHECK(p.embedding == 50257ull * 768 + 1024ull * 768);                     // 39,383,808
  CHECK(p.non_embedding == 12ull * (12 * 768 * 768 + 13 * 768) + 2 * 768);  // 85,056,000
  CHECK(p.total == p.embedding + p.non_embedding);

  const FlopsPerToken f = flops_per_token(d, 1024);
  // PaLM: N = 124,439,808 - 1024*768 = 123,653,376; 6N + 12*12*768*1024.
  CHECK(f.n_palm == 123653376ull);
  CHECK(f.palm == 6.0 * 123653376 + 12.0 * 12 * 768 * 1024);
  CHECK(f.palm == 855166464.0);
  // llm.c: N = every allocated parameter; 6N + 6*12*768*1024.
  CHECK(f.n_llmc == 124475904ull);
  CHECK(f.llmc == 803478528.0);
}

void test_layout_formulas() {
  CHECK(pipeline_bubble(1, 8) == 0.0);
  CHECK_NEAR(pipeline_bubble(4, 8), 3.0 / 11.0, 1e-15);
  CHECK_NEAR(pipeline_bubble(2, 1), 0.5, 1e-15);
  CHECK(allreduce_bytes(1000, 1) == 0.0);
  CHECK_NEAR(allreduce_bytes(1000, 2), 1000.0, 1e-9);
  CHECK_NEAR(allreduce_bytes(1000, 4), 1500.0, 1e-9);
  CHECK_NEAR(reduce_scatter_bytes(1000, 4), 750.0, 1e-9);
  ZeroDivisors z = zero_divisors(0, 8);
  CHECK(z.master == 1 && z.optimizer == 1 && z.gradients == 1);
  z = zero_divisors(1, 8);
  CHECK(z.master == 8 && z.optimizer == 8 && z.gradients == 1);
  z = zero_divisors(2, 8);
  CHECK(z.master == 8 && z.optimizer == 8 && z.gradients == 8);
  CHECK(stage_layers(5, 2, 0) == 3 && stage_layers(5, 2, 1) == 2);
  CHECK(stage_layers(12, 4, 3) == 3);
}

void test_single_rank_memory() {
  const RunConfig c = cfg({"model.vocab_size=512"});
  const Plan plan = make_plan(c, device());
  const ModelDims d = dims_from_config(c.model);
  const uint64_t P = num_parameters(d);
  CHECK(plan.stages.size() == 1);
  const MemoryBreakdown& m = plan.peak();
  CHECK(m.weights == 4 * P && m.gradients == 4 * P && m.adam_m == 4 * P && m.adam_v == 4 * P);
  CHECK(m.master_weights == 0);
  CHECK(m.total() == sum(m));
  // On one rank, activations + workspace are exactly the model's own arena.
  CHECK(m.activations + m.workspace == 4 * activation_floats(d, c.train.micro_batch, c.train.seq_len));
  CHECK(m.runtime > 0);
  CHECK(plan.fits);
  CHECK(!make_plan(c, device(1e12, 1e10, 1 << 20)).fits);
}

void test_zero_and_dp() {
  const RunConfig base = cfg({"model.preset=gpt2-124m", "parallel.dp=4"});
  const uint64_t P = num_parameters(dims_from_config(base.model));
  const Plan z0 = make_plan(base, device());
  RunConfig c1 = base, c2 = base;
  c1.parallel.zero = 1;
  c2.parallel.zero = 2;
  const Plan z1 = make_plan(c1, device()), z2 = make_plan(c2, device());
  const uint64_t shard = (P + 3) / 4;
  CHECK(z0.peak().adam_m == 4 * P && z0.peak().gradients == 4 * P);
  CHECK(z1.peak().adam_m == 4 * shard && z1.peak().adam_v == 4 * shard && z1.peak().gradients == 4 * P);
  CHECK(z2.peak().adam_m == 4 * shard && z2.peak().gradients == 4 * shard);
  CHECK(z1.peak().weights == 4 * P && z2.peak().weights == 4 * P);
  // DP traffic: all-reduce 2(n-1)/n x grad bytes; ZeRO's reduce-scatter + all-gather moves the same.
  CHECK_NEAR(z0.stages[0].comm_dp_bytes, 1.5 * 4.0 * static_cast<double>(P), 1.0);
  CHECK_NEAR(z1.stages[0].comm_dp_bytes, 1.5 * 4.0 * static_cast<double>(P), 1.0);
  // With the data-parallel bucket buffers, workspace grows by two buckets.
  const Plan one = make_plan(cfg({"model.preset=gpt2-124m"}), device());
  CHECK(z0.peak().workspace == one.peak().workspace + 2 * (25u << 20));
}

// CPU bf16 (engine/cpu/matmul_bf16.h) stores fp32 like an fp32 run and adds the bf16 copies of the
// largest matmul's operands: the LM head's input, weight and output gradient (2 bytes each).
void test_cpu_bf16_storage() {
  const RunConfig f32 = cfg({"model.preset=gpt2-124m", "train.micro_batch=8", "train.seq_len=256",
                            "train.logits_chunk_mb=256"});
  RunConfig b16 = f32;
  b16.train.dtype = "bf16";
  const MemoryBreakdown a = make_plan(f32, device()).peak(), b = make_plan(b16, device()).peak();
  CHECK(b.weights == a.weights && b.gradients == a.gradients && b.activations == a.activations);
  CHECK(b.master_weights == 0);
  const ModelDims d = dims_from_config(f32.model);
  const uint64_t N = 8 * 256, C = static_cast<uint64_t>(d.n_embd), V = static_cast<uint64_t>(d.padded_vocab);
  // The fused LM head (train.logits_chunk_mb = 256): the head's copies are one chunk of rows, 256 MiB /
  // (50304 x 4 bytes) = 1334 -> 1280 rows (a multiple of 64), N = 2048 evened out to 2 x 1024; 0 = all
  // N rows as before.
  const uint64_t R = static_cast<uint64_t>(make_plan(f32, device()).logits_chunk_rows);
  CHECK(R == 1024);
  CHECK(b.workspace == a.workspace + 2 * (R * C + V * C + R * V));
  RunConfig f32w = f32, b16w = b16;
  f32w.train.logits_chunk_mb = b16w.train.logits_chunk_mb = 0;
  const MemoryBreakdown aw = make_plan(f32w, device()).peak(), bw = make_plan(b16w, device()).peak();
  CHECK(bw.workspace == aw.workspace + 2 * (N * C + V * C + N * V));
  CHECK(aw.workspace - a.workspace == 4 * (N - R) * V);  // the logits: N rows before, R after
}

void test_bf16_master_weights() {
  const RunConfig c = cfg({"run.device=cuda", "train.dtype=bf16", "parallel.dp=2", "parallel.zero=1"});
  const uint64_t P = num_parameters(dims_from_config(c.model));
  const Plan plan = make_plan(c, device());
  CHECK(plan.peak().weights == 2 * P);
  CHECK(plan.peak().gradients == 2 * P);
  CHECK(plan.peak().master_weights == 4 * ((P + 1) / 2));
  const Plan fp32 = make_plan(cfg({"run.device=cuda", "parallel.dp=2", "parallel.zero=1"}), device());
  CHECK(plan.peak().activations * 2 == fp32.peak().activations);
}

void test_tensor_parallel() {
  const RunConfig c1 = cfg({"model.preset=gpt2-124m"});
  const RunConfig c2 = cfg({"model.preset=gpt2-124m", "parallel.tp=2"});
  const ModelDims d = dims_from_config(c1.model);
  const Plan p1 = make_plan(c1, device()), p2 = make_plan(c2, device());
  const uint64_t C = 768, L = 12;
  // Split: qkv, attproj, fc, fcproj weights, the qkv and fc biases, and the token embedding.
  const uint64_t split = L * (12 * C * C + 7 * C) + static_cast<uint64_t>(d.padded_vocab) * C;
  CHECK(p1.stages[0].params - p2.stages[0].params == split / 2);
  CHECK(p1.stages[0].params == num_parameters(d));
  CHECK(p2.peak().activations < p1.peak().activations);
  // TP traffic per micro-batch: (4 per block + embedding + head) all-reduces of B*T*C fp32, plus the
  // cross-entropy's 3 (B,T) vectors; each all-reduce over 2 ranks moves 2(2-1)/2 = 1 x its bytes.
  const double btc = 8.0 * 256 * 768;
  CHECK_NEAR(p2.stages[0].comm_tp_bytes, (4.0 * 12 + 2) * btc * 4 + 3.0 * 8 * 256 * 4, 1.0);
  // Compute halves.
  CHECK_NEAR(p2.stages[0].flops * 2, p1.stages[0].flops, 1.0);
}

void test_pipeline() {
  const RunConfig c = cfg({"parallel.pp=2", "parallel.micro_batches=4", "model.vocab_size=512"});
  const ModelDims d = dims_from_config(c.model);
  const Plan plan = make_plan(c, device());
  CHECK(plan.stages.size() == 2);
  const StagePlan &s0 = plan.stages[0], &s1 = plan.stages[1];
  CHECK(s0.n_layers == 2 && s1.n_layers == 2 && s1.first_layer == 2);
  CHECK(s0.embedding && !s0.head && s1.head && !s1.embedding);
  // The parameters split across stages, plus the last stage's copy of the tied embedding.
  CHECK(s0.params + s1.params == num_parameters(d) + static_cast<uint64_t>(d.padded_vocab) * d.n_embd);
  // 1F1B: stage s keeps min(p - s, m) micro-batches in flight; GPipe keeps all m.
  CHECK(s0.in_flight == 2 && s1.in_flight == 1);
  RunConfig g = c;
  g.parallel.schedule = "gpipe";
  const Plan gp = make_plan(g, device());
  CHECK(gp.stages[0].in_flight == 4 && gp.stages[1].in_flight == 4);
  CHECK(gp.stages[0].memory.activations > s0.memory.activations);
  CHECK_NEAR(plan.bubble, 1.0 / 5.0, 1e-15);
  CHECK_NEAR(plan.bubble_s, plan.compute_s * 1.0 / 4.0, 1e-12);
  CHECK_NEAR(plan.bubble_s / plan.step_s, 1.0 / 5.0, 1e-9 + plan.comm_s / plan.step_s);
  // Stage FLOPs add up to the whole model's PaLM count.
  CHECK_NEAR((s0.flops + s1.flops) / plan.flops_per_step, 1.0, 1e-12);
  // Point-to-point: each stage sends one (B,T,C) tensor per micro-batch (activations forward or
  // gradients backward), plus the tied-embedding gradient exchange.
  const double btc = 8.0 * 256 * 256 * 4;
  CHECK_NEAR(s0.comm_pp_bytes, 4 * btc + static_cast<double>(d.padded_vocab) * d.n_embd * 4, 1.0);
}

void test_recompute_and_time() {
  const RunConfig c = cfg({"model.preset=gpt2-124m", "train.seq_len=1024", "train.micro_batch=4"});
  RunConfig r = c;
  r.train.recompute = true;
  const Plan p = make_plan(c, device(2e12, 1e10)), pr = make_plan(r, device(2e12, 1e10));
  CHECK(pr.peak().activations < p.peak().activations / 4);
  // Every block but the last (still in place) re-runs its forward up to the GELU: 2 x (7,087,872
  // block parameters - 2,360,064 of the MLP-down weight and bias) + 4 x 768 x 1024 attention =
  // 12,601,344 FLOPs per token; the LM head is not recomputed. Of the 855,166,464 total:
  CHECK(recompute_flops_per_token(dims_from_config(c.model), 1024) == 12601344.0);
  // On a GPU the time is model FLOPs over peak x efficiency: +16.2% of the step.
  RunConfig g = c, gr = r;
  g.run.device = gr.run.device = "cuda";
  const Plan pg = make_plan(g, device(2e12, 1e10)), pgr = make_plan(gr, device(2e12, 1e10));
  CHECK_NEAR(pgr.compute_s / pg.compute_s, 1.0 + 11 * 12601344.0 / 855166464.0, 1e-12);
  CHECK_NEAR(pg.compute_s, pg.flops_per_step / (2e12 * 0.5), 1e-12);
  CHECK(pg.stages[0].work.total() == 0);
  // On a CPU (cpu_step_work): the rebuilds' matmuls (the recompute FLOPs less the attention
  // forward 4 x 768 x 1024) in the matmul term, their attention forward (2 of the 7 products) in the
  // attention term.
  const ModelDims d = dims_from_config(c.model);
  CHECK_NEAR(pr.stages[0].work.matmul - p.stages[0].work.matmul, 11 * (12601344.0 - 4.0 * 768 * 1024) * 4096,
             1e-3 * p.stages[0].work.matmul * 1e-9);
  CHECK_NEAR(pr.stages[0].work.attention - p.stages[0].work.attention,
             11 * kCpuAttentionCost * cpu_attention_flops_per_token(d, 1024) * 2 / 7 * 4096,
             1e-9 * p.stages[0].work.attention);
  // Memory: each block keeps its input (B*T*C), plus one rebuilt block less that input.
  const ActivationFloats a = activation_account(dims_from_config(c.model), 4, 1024);
  CHECK(a.layer_input == 4.0 * 1024 * 768);
  CHECK(p.peak().activations - pr.peak().activations ==
        static_cast<uint64_t>(4 * 11 * (a.per_layer - a.layer_input)));
  // time = CPU work / (peak x efficiency) + bytes / link; tokens/s = tokens / time.
  CHECK_NEAR(p.compute_s, p.stages[0].work.total() / (2e12 * 0.5), 1e-12);
  CHECK(p.comm_s == 0 && p.bubble_s == 0);
  CHECK_NEAR(p.tokens_per_s, 4096.0 / p.step_s, 1e-9);
  CHECK_NEAR(p.run_s, p.step_s * 200, 1e-9);
  CHECK(p.cost_usd == 0);
  RunConfig priced = c;
  priced.budget.usd_per_hour = 36;
  const Plan pp = make_plan(priced, device(2e12, 1e10));
  CHECK_NEAR(pp.cost_usd, pp.run_s / 3600 * 36, 1e-12);
  RunConfig dp = c;
  dp.parallel.dp = 2;
  const Plan pd = make_plan(dp, device(2e12, 1e10));
  CHECK_NEAR(pd.comm_s, 4.0 * static_cast<double>(pd.stages[0].params) / 1e10, 1e-12);
  CHECK_NEAR(pd.compute_s, p.compute_s, 1e-12);  // twice the tokens on twice the ranks
  PlanOptions o;
  o.efficiency = 0.25;
  CHECK_NEAR(make_plan(c, device(2e12, 1e10), o).compute_s, 2 * p.compute_s, 1e-12);
}

}  // namespace

// The Llama-family presets against the released models' published totals (their config.json shapes):
// the parameter layout (fused q/k/v and gate/up, GQA widths, head_dim, biases, q/k norms, tied or
// untied head) counts exactly what the checkpoints hold.
void test_llama_counts() {
  const struct {
    const char* preset;
    uint64_t total;
  } released[] = {{"smollm2-135m", 134515008ull},
                  {"qwen2.5-0.5b", 494032768ull},
                  {"qwen3-0.6b", 596049920ull},
                  {"llama3.2-1b", 1235814400ull}};
  for (const auto& r : released) {
    const ModelDims d = dims_from_config(cfg({std::string("model.preset=") + r.preset}).model);
    const ParamCounts p = count_parameters(d);
    CHECK_MSG(p.total == r.total, "%s: %llu parameters, the released model has %llu", r.preset,
              static_cast<unsigned long long>(p.total), static_cast<unsigned long long>(r.total));
    CHECK(p.embedding == static_cast<uint64_t>(d.vocab_size) * d.n_embd);  // no position table
    // Tied: every parameter does matmul work (the embedding is the LM head); attention over H x head_dim.
    const FlopsPerToken f = flops_per_token(d, 2048);
    CHECK(f.n_palm == p.total);
    CHECK(f.palm == 6.0 * static_cast<double>(p.total) + 12.0 * d.n_layer * d.q_dim() * 2048);
  }
  // Qwen3-0.6B: 0.44B non-embedding, as Qwen reports.
  const ModelDims q3 = dims_from_config(cfg({"model.preset=qwen3-0.6b"}).model);
  CHECK(count_parameters(q3).non_embedding == 596049920ull - 151936ull * 1024);
  // Untied: the token embedding is a lookup, the LM head a matmul (its V x C counts once).
  RunConfig c = cfg({"model.preset=smollm2-135m", "model.tie_embeddings=false"});
  const ModelDims u = dims_from_config(c.model);
  CHECK(count_parameters(u).total == 134515008ull + 49152ull * 576);
  CHECK(flops_per_token(u, 2048).n_palm == 134515008ull);
  // The planner's per-rank parameters are the model's own shards: tp = 3 splits SmolLM2's 3 K/V heads.
  c = cfg({"model.preset=smollm2-135m", "parallel.tp=3"});
  const Plan p = make_plan(c, device(1e12, 1e10));
  size_t shard0 = 0;
  for (size_t n :
       local_param_sizes(dims_from_config(c.model), make_shard(dims_from_config(c.model), 3, 0, 1, 0)))
    shard0 += n;
  CHECK(p.stages[0].params == shard0);
}

int main() {
  test_gpt2_124m_counts();
  test_llama_counts();
  test_layout_formulas();
  test_single_rank_memory();
  test_zero_and_dp();
  test_bf16_master_weights();
  test_cpu_bf16_storage();
  test_tensor_parallel();
  test_pipeline();
  test_recompute_and_time();
  return flotilla_test::summary("test_plan_formulas");
}
