// LoRA targets, scaling and the adapter table (see lora.h).
#include "engine/model/lora.h"

#include <algorithm>
#include <cmath>

#include "engine/config/run_config.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/model/model_dims.h"
#include "engine/model/param_layout.h"

namespace flotilla {
namespace {

const char* const kNames[kNumLoraTargets] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                             "gate_proj", "up_proj", "down_proj"};

constexpr uint32_t kAll = (1u << kNumLoraTargets) - 1;
constexpr uint32_t kAttention = (1u << kLoraQ) | (1u << kLoraK) | (1u << kLoraV) | (1u << kLoraO);
constexpr uint32_t kMlp = (1u << kLoraGate) | (1u << kLoraUp) | (1u << kLoraDown);

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && (s[a] == ' ' || s[a] == '\t')) ++a;
  while (b > a && (s[b - 1] == ' ' || s[b - 1] == '\t')) --b;
  return s.substr(a, b - a);
}

}  // namespace

const char* lora_target_name(int target) {
  return target >= 0 && target < kNumLoraTargets ? kNames[target] : "?";
}

int find_lora_target(const std::string& name) {
  for (int t = 0; t < kNumLoraTargets; ++t)
    if (name == kNames[t]) return t;
  return -1;
}

bool lora_column_parallel(int target) { return target != kLoraO && target != kLoraDown; }

uint32_t parse_lora_targets(const std::string& text) {
  const std::string all = trim(text);
  if (all == "all-linear") return kAll;
  if (all == "attention") return kAttention;
  if (all == "mlp") return kMlp;
  uint32_t bits = 0;
  size_t start = 0;
  while (start <= all.size()) {
    const size_t comma = all.find(',', start);
    const std::string word =
        trim(all.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (word.empty()) {
      throw_config(
          "lora.targets = \"" + text +
          "\" has an empty name; use all-linear, attention, mlp or a comma-separated list of q_proj, "
          "k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj");
    }
    const int t = find_lora_target(word);
    if (t < 0) {
      std::string hint;
      if (word == "c_attn" || word == "c_proj" || word == "c_fc")
        hint = " (a GPT-2 module name; LoRA trains the Llama family)";
      else if (word == "lm_head" || word == "embed_tokens")
        hint = " (the embedding and LM head stay frozen; LoRA adapts the linear projections of each layer)";
      throw_config("lora.targets: \"" + word + "\" is not a projection of the llama architecture" + hint +
                   "; use q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, or all-linear, "
                   "attention, mlp");
    }
    if (bits & (1u << t)) throw_config("lora.targets names \"" + word + "\" twice");
    bits |= 1u << t;
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return bits;
}

std::string lora_targets_text(uint32_t targets) {
  std::string out;
  for (int t = 0; t < kNumLoraTargets; ++t)
    if (targets & (1u << t)) out += (out.empty() ? "" : ",") + std::string(kNames[t]);
  return out;
}

int LoraSpec::count() const {
  int n = 0;
  for (int t = 0; t < kNumLoraTargets; ++t) n += has(t) ? 1 : 0;
  return n;
}

float LoraSpec::scale() const {
  const double r = static_cast<double>(rank);
  return static_cast<float>(rslora ? alpha / std::sqrt(r) : alpha / r);
}

int LoraSpec::a_index(int target) const {
  if (!has(target)) return -1;
  int i = 0;
  for (int t = 0; t < target; ++t) i += has(t) ? 2 : 0;
  return i;
}

LoraSpec lora_spec(const RunConfig& c) {
  LoraSpec s;
  if (!c.lora.enabled) return s;
  s.rank = c.lora.rank;
  s.alpha = c.lora.alpha;
  s.dropout = static_cast<float>(c.lora.dropout);
  s.rslora = c.lora.use_rslora;
  s.targets = parse_lora_targets(c.lora.targets);
  s.seed = c.run.seed ^ 0x10A4D7011ull;
  s.nf4 = c.lora.base_quant == "nf4";
  s.double_quant = c.lora.double_quant;
  return s;
}

std::pair<int, int> lora_target_shape(const ModelDims& d, int target) {
  const int C = d.n_embd, Q = d.q_dim(), KV = d.kv_dim(), F = d.ffn();
  switch (target) {
    case kLoraQ:
      return {C, Q};
    case kLoraK:
    case kLoraV:
      return {C, KV};
    case kLoraO:
      return {Q, C};
    case kLoraGate:
    case kLoraUp:
      return {C, F};
    default:
      return {F, C};
  }
}

std::vector<TensorSpec> lora_table(const ModelDims& d, const LoraSpec& spec) {
  std::vector<TensorSpec> out;
  const size_t r = static_cast<size_t>(spec.rank);
  for (int t = 0; t < kNumLoraTargets; ++t) {
    if (!spec.has(t)) continue;
    const auto [in, outw] = lora_target_shape(d, t);
    const bool column = lora_column_parallel(t);
    TensorSpec a;
    a.name = std::string("lora_A.") + kNames[t];
    a.rows = r;
    a.cols = static_cast<size_t>(in);
    a.split = column ? TpSplit::kReplicated : TpSplit::kCols;
    a.holder = Holder::kLayers;
    a.decays = true;
    a.row_sections = {a.rows};
    TensorSpec b;
    b.name = std::string("lora_B.") + kNames[t];
    b.rows = static_cast<size_t>(outw);
    b.cols = r;
    b.split = column ? TpSplit::kRows : TpSplit::kReplicated;
    b.holder = Holder::kLayers;
    b.decays = true;
    b.row_sections = {b.rows};
    out.push_back(std::move(a));
    out.push_back(std::move(b));
  }
  return out;
}

size_t lora_parameter_count(const ModelDims& d, const LoraSpec& spec) {
  size_t n = 0;
  for (const TensorSpec& t : lora_table(d, spec)) n += t.rows * t.cols * static_cast<size_t>(d.n_layer);
  return n;
}

void lora_init_tensor(const ModelDims& d, const LoraSpec& spec, int tensor, float* t, size_t n,
                      uint64_t seed) {
  if (tensor % 2 == 1) {  // B: zero, so the adapted model starts as the base
    std::fill(t, t + n, 0.0f);
    return;
  }
  const std::vector<TensorSpec> table = lora_table(d, spec);
  const double bound = 1.0 / std::sqrt(static_cast<double>(table[static_cast<size_t>(tensor)].cols));
  // One stream per 64 Ki-element chunk, as fill_normal: parallel-safe and thread-count independent.
  constexpr size_t kChunk = 65536;
  for (size_t c0 = 0; c0 < n; c0 += kChunk) {
    uint64_t z = seed ^ (static_cast<uint64_t>(tensor + 1) * 0x9E3779B97F4A7C15ull) ^
                 ((c0 / kChunk) * 0xD1B54A32D192ED03ull) ^ 0x4C6F5241ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    Rng rng(z ^ (z >> 31));
    const size_t c1 = std::min(n, c0 + kChunk);
    for (size_t i = c0; i < c1; ++i) t[i] = static_cast<float>((2.0 * rng.uniform_double() - 1.0) * bound);
  }
}

}  // namespace flotilla
