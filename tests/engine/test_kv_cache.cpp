// The KV cache (Model::forward_cached, generate()'s cache path) against full recomputation on the
// CPU: logits of a prefill cut in two pieces and of decode steps equal those of one forward over the
// whole sequence (fp32 rounding only), and generate() with use_cache gives the recompute path's
// tokens, token for token, greedy and seeded sampling, for GPT-2, Llama (grouped-query attention,
// llama3 RoPE scaling, qkv biases), Qwen 3 (qk-norm), a LoRA model (unmerged adapters) and a QLoRA
// one, in fp32 and with bf16 matmuls; with rows of different lengths finishing at different steps
// (stop ids, a caller's stop) and rows running past max_seq_len (the re-prefilled window).
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "check.h"
#include "engine/backend/registry.h"
#include "engine/config/config_io.h"
#include "engine/config/config_validate.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/cpu/matmul_bf16.h"
#include "engine/infer/generate.h"
#include "engine/model/gpt.h"
#include "engine/model/model_dims.h"
#include "engine/train/sampler.h"

using namespace flotilla;

namespace {

struct Case {
  std::string name;
  ModelDims dims;
  LoraSpec lora;
};

ModelDims dims_of(const std::vector<std::string>& overrides) {
  RunConfig c;
  apply_overrides(c, overrides);
  validate_or_throw(c);
  return dims_from_config(c.model);
}

std::vector<Case> cases() {
  const std::vector<std::string> llama = {
      "model.preset=custom",  "model.arch=llama", "model.n_layer=2",  "model.n_head=4",
      "model.n_kv_head=2",    "model.n_embd=64",  "model.ffn_dim=96", "model.vocab_size=300",
      "model.max_seq_len=40", "train.seq_len=40"};
  std::vector<Case> out;
  out.push_back(
      {"gpt2",
       dims_of({"model.preset=custom", "model.arch=gpt2", "model.n_layer=2", "model.n_head=4",
                "model.n_embd=64", "model.vocab_size=300", "model.max_seq_len=40", "train.seq_len=40"}),
       {}});
  std::vector<std::string> l3 = llama;
  for (const char* o : {"model.qkv_bias=true", "model.rope_scaling=llama3", "model.rope_factor=8",
                        "model.rope_low_freq_factor=1", "model.rope_high_freq_factor=4",
                        "model.rope_original_max_position=8"})
    l3.push_back(o);
  out.push_back({"llama (GQA, llama3 RoPE, qkv bias)", dims_of(l3), {}});
  std::vector<std::string> q3 = llama;
  q3.push_back("model.qk_norm=true");
  out.push_back({"qwen3 (qk-norm)", dims_of(q3), {}});
  LoraSpec lo;
  lo.rank = 4;
  lo.alpha = 8;
  lo.targets = 0x7f;  // every projection
  out.push_back({"llama LoRA", dims_of(llama), lo});
  lo.nf4 = true;
  std::vector<std::string> q4 = llama;
  q4.push_back("model.ffn_dim=128");  // NF4 blocks of 64 along every row
  out.push_back({"llama QLoRA", dims_of(q4), lo});
  return out;
}

std::unique_ptr<Model> make(const Case& c) {
  ModelOptions mo;
  mo.lora = c.lora;
  auto m = std::make_unique<Model>(c.dims, ModelShard{}, nullptr, mo);
  m->init_random(11);
  if (c.lora.enabled()) {  // B starts at zero: random adapters so they change the output
    std::vector<float> p(m->num_params());
    Rng r(5);
    for (float& x : p) x = (r.uniform() - 0.5f) * 0.2f;
    m->set_params(p.data());
  }
  m->set_training(false);
  return m;
}

std::vector<int32_t> random_ids(Rng& r, size_t n, int vocab) {
  std::vector<int32_t> v(n);
  for (auto& x : v) x = static_cast<int32_t>(r.below(static_cast<uint64_t>(vocab)));
  return v;
}

double rel_diff(const float* a, const float* b, int n) {
  double num = 0, den = 0;
  for (int i = 0; i < n; ++i) {
    num = std::max(num, static_cast<double>(std::abs(a[i] - b[i])));
    den = std::max(den, static_cast<double>(std::abs(b[i])));
  }
  return num / std::max(den, 1e-6);
}

// Prefill 6 tokens, a chunk of 4 at positions 6..9, then 3 single decode steps, in cache row 1 of
// 2 (row 0 holds another sequence): each position's logits equal the full forward's.
void logits_match(const Case& c, Model& m, double tol) {
  const ModelDims& d = m.dims();
  Rng r(9);
  const std::vector<int32_t> seq = random_ids(r, 13, d.vocab_size);
  const std::vector<int32_t> other = random_ids(r, 13, d.vocab_size);
  m.forward(seq.data(), nullptr, 1, 13);
  const size_t Vp = static_cast<size_t>(d.padded_vocab);
  std::vector<float> full(13 * Vp);
  m.copy_logits(full.data());
  m.enable_kv_cache(2, 16);
  std::vector<int32_t> p0 = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  m.forward_cached(other.data(), p0.data(), 1, 13, 0);  // row 0: must not disturb row 1
  std::vector<float> got(13 * Vp);
  m.forward_cached(seq.data(), p0.data(), 1, 6, 1);
  m.copy_logits(got.data());
  const std::vector<int32_t> p1 = {6, 7, 8, 9};
  m.forward_cached(seq.data() + 6, p1.data(), 1, 4, 1);
  m.copy_logits(got.data() + 6 * Vp);
  for (int t = 10; t < 13; ++t) {
    m.forward_cached(seq.data() + t, &t, 1, 1, 1);
    m.copy_logits(got.data() + static_cast<size_t>(t) * Vp);
  }
  double worst = 0;
  for (size_t t = 0; t < 13; ++t)
    worst = std::max(worst, rel_diff(got.data() + t * Vp, full.data() + t * Vp, d.vocab_size));
  CHECK_MSG(worst < tol, "%s: cached logits differ from the forward's by %g (relative)", c.name.c_str(),
            worst);
  // logit_at: one row of logits per row, the named token's.
  const int32_t at = 4;
  m.forward_cached(seq.data(), p0.data(), 1, 6, 1, &at);
  std::vector<float> one(Vp);
  m.copy_logits(one.data());
  CHECK(rel_diff(one.data(), got.data() + 4 * Vp, d.vocab_size) < 1e-6);
  m.disable_kv_cache();
  CHECK(m.kv_cache_rows() == 0);
}

void tokens_match(const Case& c, Model& m) {
  const ModelDims& d = m.dims();
  Rng r(4);
  // Lengths 3, 11, 1, 36 and 45: the fourth runs past max_seq_len (40) after 4 tokens, the last starts past
  // it.
  const std::vector<std::vector<int32_t>> prompts = {
      random_ids(r, 3, d.vocab_size), random_ids(r, 11, d.vocab_size), random_ids(r, 1, d.vocab_size),
      random_ids(r, 36, d.vocab_size), random_ids(r, 45, d.vocab_size)};
  for (float temperature : {0.0f, 0.9f}) {
    infer::GenerateOptions o;
    o.max_tokens = 10;
    o.temperature = temperature;
    o.top_k = 40;
    o.top_p = 0.95f;
    o.repetition_penalty = 1.1f;
    o.seed = 21;
    o.use_cache = false;
    const auto want = infer::generate(m, prompts, o);
    o.use_cache = true;
    const auto got = infer::generate(m, prompts, o);
    for (size_t k = 0; k < prompts.size(); ++k) {
      CHECK_MSG(got[k].ids == want[k].ids, "%s, temperature %g, row %zu: cached tokens differ",
                c.name.c_str(), static_cast<double>(temperature), k);
      CHECK(got[k].stop == want[k].stop);
    }
    // Rows finishing early in the middle of the batch: a caller's stop on row 1 after 2 tokens, and
    // row 0's third token as a stop id.
    o.stop_ids = {want[0].ids[2]};
    auto stop_row1 = [] {  // ends row 1 after its second token
      auto seen = std::make_shared<int>(0);
      return infer::TokenCallback([seen](size_t row, int32_t) { return row != 1 || ++*seen < 2; });
    };
    o.use_cache = false;
    const auto want2 = infer::generate(m, prompts, o, stop_row1());
    o.use_cache = true;
    const auto got2 = infer::generate(m, prompts, o, stop_row1());
    for (size_t k = 0; k < prompts.size(); ++k) {
      CHECK_MSG(got2[k].ids == want2[k].ids, "%s, early stops, row %zu", c.name.c_str(), k);
      CHECK(got2[k].stop == want2[k].stop);
    }
    CHECK(want2[0].stop == infer::StopReason::kEndToken && want2[1].stop == infer::StopReason::kCaller);
  }
  // The trainer's sampler (cache path, the caller's stream) draws as the recompute path from it.
  SampleOptions so;
  so.tokens = 8;
  so.temperature = 0.8f;
  Rng a(77), b(77);
  infer::GenerateOptions o;
  o.max_tokens = 8;
  o.temperature = 0.8f;
  o.use_cache = false;
  o.rng = &b;
  CHECK(sample_tokens(m, prompts[1], so, a) == infer::generate(m, {prompts[1]}, o)[0].ids);
  CHECK(a.next_u64() == b.next_u64());  // both streams advanced alike
}

}  // namespace

int main() {
  Backend& cpu = get_backend("cpu");
  cpu.set_threads(1);  // the answers do not depend on it; two threads on a loaded 2-core machine crawl
  for (const Case& c : cases()) {
    auto m = make(c);
    const auto t0 = std::chrono::steady_clock::now();
    logits_match(c, *m, 2e-5);
    tokens_match(c, *m);
    std::printf("%s: %.2f s\n", c.name.c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  // bf16 matmuls on the CPU (fp32 storage): the cache path runs the same matmuls on fewer rows.
  if (cpu::bf16_matmul_refusal().empty()) {
    cpu.set_matmul_dtype(DType::kBF16);
    for (const Case& c : cases()) {
      if (c.lora.nf4)
        continue;  // QLoRA's bf16 NF4 kernels are slow here; its fp32 run above covers the cache
      auto m = make(c);
      const auto t0 = std::chrono::steady_clock::now();
      logits_match(c, *m, 2e-2);
      tokens_match(c, *m);
      std::printf("bf16 %s: %.2f s\n", c.name.c_str(),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    cpu.set_matmul_dtype(DType::kF32);
  } else {
    std::printf("bf16 matmuls skipped: %s\n", cpu::bf16_matmul_refusal().c_str());
  }
  return flotilla_test::summary("kv_cache");
}
