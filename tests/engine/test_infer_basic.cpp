// The inference primitives on a small random model, against Model::forward's own logits: score()
// gives each token's log-softmax (computed here in long double) and the greedy flags; rows scored
// together equal rows scored alone (right padding never reaches a scored position); generate()'s
// rows are independent of their batch; the trainer's sample_tokens follows the same sampling rule;
// repetition penalty follows transformers' rule on a crafted row.
#include <cmath>
#include <string>
#include <vector>

#include "check.h"
#include "engine/config/config_io.h"
#include "engine/config/config_validate.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/infer/generate.h"
#include "engine/infer/score.h"
#include "engine/model/gpt.h"
#include "engine/model/model_dims.h"
#include "engine/train/sampler.h"

using namespace flotilla;

namespace {

ModelDims dims_for(const std::string& arch) {
  RunConfig c;
  if (arch == "llama")
    apply_overrides(c, {"model.preset=custom", "model.arch=llama", "model.n_layer=2", "model.n_head=4",
                        "model.n_kv_head=2", "model.n_embd=64", "model.ffn_dim=96", "model.vocab_size=300",
                        "model.max_seq_len=48", "train.seq_len=48"});
  else
    apply_overrides(c, {"model.preset=tiny", "model.vocab_size=300", "model.max_seq_len=48", "train.seq_len=48"});
  validate_or_throw(c);
  return dims_from_config(c.model);
}

std::vector<int32_t> random_ids(Rng& r, size_t n, int vocab) {
  std::vector<int32_t> v(n);
  for (auto& x : v) x = static_cast<int32_t>(r.below(static_cast<uint64_t>(vocab)));
  return v;
}

void scores_match_forward(const std::string& arch) {
  const ModelDims d = dims_for(arch);
  Model m(d);
  m.init_random(5);
  m.set_training(false);
  Rng r(3);
  std::vector<infer::ScoreRequest> reqs;
  for (size_t n : {2u, 9u, 20u, 49u}) reqs.push_back({random_ids(r, n, d.vocab_size), n / 2 > 0 ? n / 2 : 1});
  const auto together = infer::score(m, reqs, 4);
  for (size_t k = 0; k < reqs.size(); ++k) {
    const auto& q = reqs[k];
    const int T = static_cast<int>(q.ids.size() - 1);
    m.forward(q.ids.data(), nullptr, 1, T);
    const float* lg = m.logits();
    double worst = 0;
    bool greedy_same = true;
    for (size_t i = q.first; i < q.ids.size(); ++i) {
      const float* row = lg + (i - 1) * static_cast<size_t>(d.padded_vocab);
      long double mx = row[0], s = 0;
      int best = 0;
      for (int v = 1; v < d.vocab_size; ++v)
        if (row[v] > mx) mx = row[v], best = v;
      for (int v = 0; v < d.vocab_size; ++v) s += std::exp(static_cast<long double>(row[v]) - mx);
      const double want = static_cast<double>(row[q.ids[i]] - mx - std::log(s));
      worst = std::max(worst, std::abs(want - together[k].logprob[i - q.first]));
      greedy_same = greedy_same && (together[k].greedy[i - q.first] == (best == q.ids[i] ? 1 : 0));
    }
    // Batched rows run the same kernels at another B: fp32 rounding, not a different answer.
    CHECK_MSG(worst < 2e-4, "%s request %zu: worst |logprob diff| %g", arch.c_str(), k, worst);
    CHECK(greedy_same);
    CHECK(together[k].logprob.size() == q.ids.size() - q.first);
  }
  bool refused = false;
  try {
    infer::score(m, {{{1}, 1}});
  } catch (const Error& e) {
    refused = e.code() == ExitCode::kUsage && std::string(e.what()).find("score request 0") != std::string::npos;
  }
  CHECK_MSG(refused, "a one-token request is refused, naming it");
}

void generation_rows_independent(const std::string& arch) {
  const ModelDims d = dims_for(arch);
  Model m(d);
  m.init_random(7);
  m.set_training(false);
  Rng r(4);
  const std::vector<std::vector<int32_t>> prompts = {random_ids(r, 3, d.vocab_size), random_ids(r, 11, d.vocab_size)};
  for (float temperature : {0.0f, 0.9f}) {
    infer::GenerateOptions o;
    o.max_tokens = 12;
    o.temperature = temperature;
    o.top_k = 40;
    o.seed = 21;
    o.use_cache = false;
    const auto both = infer::generate(m, prompts, o);
    CHECK(both.size() == 2 && both[0].ids.size() == 12 && both[1].ids.size() == 12);
    infer::GenerateOptions second = o;
    second.seed = o.seed + 1;  // row 1 draws from seed + 1
    const auto alone0 = infer::generate(m, {prompts[0]}, o);
    const auto alone1 = infer::generate(m, {prompts[1]}, second);
    CHECK(alone0[0].ids == both[0].ids);
    CHECK(alone1[0].ids == both[1].ids);
    // The trainer's sampler: the same rule from the same stream.
    SampleOptions so;
    so.tokens = 12;
    so.temperature = temperature;
    so.top_k = 40;
    Rng rng(o.seed);
    CHECK(sample_tokens(m, prompts[0], so, rng) == both[0].ids);
  }
  // A caller's stop ends its row only.
  infer::GenerateOptions o;
  o.max_tokens = 6;
  o.temperature = 0;
  o.use_cache = false;
  const auto stopped = infer::generate(m, prompts, o, [](size_t row, int32_t) { return row != 0; });
  CHECK(stopped[0].ids.size() == 1 && stopped[0].stop == infer::StopReason::kCaller);
  CHECK(stopped[1].ids.size() == 6 && stopped[1].stop == infer::StopReason::kLength);
}

void repetition_penalty_rule() {
  // transformers: a seen id's positive logit is divided, a negative one multiplied.
  const std::vector<float> logits = {2.0f, 1.9f, -1.0f, -1.2f};
  infer::GenerateOptions o;
  o.temperature = 0;
  Rng rng(1);
  CHECK(infer::choose_token(logits.data(), 4, o, {}, rng) == 0);
  o.repetition_penalty = 1.2f;
  CHECK(infer::choose_token(logits.data(), 4, o, {0}, rng) == 1);  // 2.0 / 1.2 < 1.9
  const std::vector<float> neg = {-1.0f, -1.1f};
  CHECK(infer::choose_token(neg.data(), 2, o, {0}, rng) == 1);  // -1.0 * 1.2 < -1.1
}

}  // namespace

int main() {
  for (const std::string arch : {"gpt2", "llama"}) {
    scores_match_forward(arch);
    generation_rows_independent(arch);
  }
  repetition_penalty_rule();
  return flotilla_test::summary("infer_basic");
}
