// The run-config key table and the helpers every reader/writer shares (formatting, diff,
// did-you-mean).
//
// Decision: rows are built by a macro from the struct member itself, so the stored type of each
// key is deduced from run_config.h (a type change there cannot drift from the table) and the
// path string is spelled by the compiler from the same tokens as the member access.
#include "engine/config/config_schema.h"

#include <algorithm>
#include <cassert>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <type_traits>
#include <utility>

#include "engine/config/presets.h"

namespace flotilla {
namespace {

template <class T>
constexpr FieldStorage storage_of() {
  if constexpr (std::is_same_v<T, std::string>)
    return FieldStorage::kString;
  else if constexpr (std::is_same_v<T, bool>)
    return FieldStorage::kBool;
  else if constexpr (std::is_same_v<T, int>)
    return FieldStorage::kInt32;
  else if constexpr (std::is_same_v<T, int64_t>)
    return FieldStorage::kInt64;
  else if constexpr (std::is_same_v<T, uint64_t>)
    return FieldStorage::kUint64;
  else if constexpr (std::is_same_v<T, double>)
    return FieldStorage::kDouble;
  else
    static_assert(sizeof(T) == 0, "RunConfig field of a type the schema does not know");
}

#define FLOTILLA_KEY(sec, member, doc, ...)                                                            \
  ConfigKey {                                                                                          \
#sec, #member, storage_of < decltype(std::declval <RunConfig>().sec.member)>(), doc,               \
        std::vector < std::string>{__VA_ARGS__ },                                                      \
                                   [](RunConfig & c) -> void* { return &c.sec.member; }, std::string() \
  }

std::vector<std::string> preset_choices() {
  std::vector<std::string> out;
  for (const auto& p : model_presets()) out.emplace_back(p.name);
  out.emplace_back("custom");
  return out;
}

std::vector<ConfigKey> build_keys() {
  std::vector<ConfigKey> k = {
      FLOTILLA_KEY(run, name, "run name: letters, digits, '-', '_', '.'"),
      FLOTILLA_KEY(run, out_dir, "run directory; empty = \"runs/<name>\" under the working directory"),
      FLOTILLA_KEY(run, seed, "seed for initialisation, shuffling and sampling"),
      FLOTILLA_KEY(run, device, "\"cpu\" or \"cuda\"", "cpu", "cuda"),
      FLOTILLA_KEY(run, threads, "CPU threads per rank; 0 = all cores (divided among local ranks)"),
      FLOTILLA_KEY(run, max_restarts,
                   "crash restarts from the last verified checkpoint; preemptions do not count"),

      FLOTILLA_KEY(model, preset, "a named shape (docs/config.md lists them) or custom"),
      FLOTILLA_KEY(model, arch, "model family: gpt2 | llama (Llama 3, Qwen 2/3, SmolLM2, Mistral-style)",
                   "gpt2", "llama"),
      FLOTILLA_KEY(model, n_layer, "transformer blocks (set by the preset unless overridden)"),
      FLOTILLA_KEY(model, n_head, "attention heads (set by the preset unless overridden)"),
      FLOTILLA_KEY(model, n_embd, "model width (set by the preset unless overridden)"),
      FLOTILLA_KEY(model, vocab_size, "tokenizer vocabulary; padded internally to a multiple of 128"),
      FLOTILLA_KEY(model, max_seq_len, "longest sequence (gpt2: rows of the learned position table)"),
      FLOTILLA_KEY(model, n_kv_head, "llama: key/value heads (grouped-query attention); 0 = n_head"),
      FLOTILLA_KEY(model, head_dim, "llama: width of one head; 0 = n_embd / n_head"),
      FLOTILLA_KEY(model, ffn_dim, "llama: SwiGLU hidden width; 0 = 4 * n_embd"),
      FLOTILLA_KEY(model, norm_eps, "llama: RMSNorm epsilon"),
      FLOTILLA_KEY(model, tie_embeddings, "llama: the LM head shares the token embedding"),
      FLOTILLA_KEY(model, qkv_bias, "llama: biases on the q, k and v projections (Qwen 2)"),
      FLOTILLA_KEY(model, qk_norm, "llama: per-head RMSNorm of q and k before RoPE (Qwen 3)"),
      FLOTILLA_KEY(model, rope_theta, "llama: RoPE base frequency"),
      FLOTILLA_KEY(model, rope_scaling, "llama: RoPE frequency scaling: default | linear | llama3", "default",
                   "linear", "llama3"),
      FLOTILLA_KEY(model, rope_factor, "llama: RoPE scaling factor (linear, llama3)"),
      FLOTILLA_KEY(model, rope_low_freq_factor, "llama: llama3 scaling, low-frequency factor"),
      FLOTILLA_KEY(model, rope_high_freq_factor, "llama: llama3 scaling, high-frequency factor"),
      FLOTILLA_KEY(model, rope_original_max_position, "llama: llama3 scaling, original context length"),
      FLOTILLA_KEY(
          model, init_from,
          "weights to start from: a HF folder or Hub name org/name[@revision], .safetensors, llm.c .bin"),

      FLOTILLA_KEY(lora, enabled, "fine-tune LoRA adapters on the frozen model.init_from weights"),
      FLOTILLA_KEY(lora, rank, "adapter rank r"),
      FLOTILLA_KEY(lora, alpha,
                   "scaling numerator: updates are alpha/r x B A (alpha/sqrt(r) with use_rslora)"),
      FLOTILLA_KEY(lora, dropout, "dropout on the adapter input while training (seeded by run.seed)"),
      FLOTILLA_KEY(lora, use_rslora, "rank-stabilised scaling alpha/sqrt(r) instead of alpha/r"),
      FLOTILLA_KEY(lora, targets, "all-linear | attention | mlp | list: q_proj,v_proj,..."),
      FLOTILLA_KEY(
          lora, init_from,
          "a PEFT adapter folder or Hub name org/name[@revision] to continue from (sets r, alpha, targets)"),
      FLOTILLA_KEY(lora, base_quant, "the frozen base's projections: none (compute dtype) | nf4 (QLoRA)"),
      FLOTILLA_KEY(lora, double_quant, "nf4: quantise the block absmax again (8-bit, blocks of 256)"),

      FLOTILLA_KEY(data, source, "\"synthetic\" (deterministic demo corpus) or \"shards\"", "synthetic",
                   "shards"),
      FLOTILLA_KEY(data, train, "train shards: path or glob of llm.c .bin files"),
      FLOTILLA_KEY(data, val, "validation shards: path or glob (optional)"),
      FLOTILLA_KEY(data, synthetic_tokens,
                   "tokens generated for source = \"synthetic\" (train; val gets 1/10)"),
      FLOTILLA_KEY(data, shuffle, "deterministic seeded shuffling of sequences"),
      FLOTILLA_KEY(data, checked, "verify every token < vocab_size while reading (slower)"),

      FLOTILLA_KEY(train, steps, "optimizer steps"),
      FLOTILLA_KEY(train, micro_batch, "sequences per micro-batch per data-parallel rank (B)"),
      FLOTILLA_KEY(train, seq_len, "tokens per sequence (T)"),
      FLOTILLA_KEY(train, global_batch_tokens,
                   "tokens per optimizer step; 0 = micro_batch*seq_len*dp (no accumulation)"),
      FLOTILLA_KEY(train, dtype, "fp32 | bf16 (cpu: needs AVX512_BF16 or AMX-BF16)", "fp32", "bf16"),
      FLOTILLA_KEY(train, recompute, "recompute activations in backward to save memory"),
      FLOTILLA_KEY(train, deterministic,
                   "bit-identical repeat runs (CPU: any thread count; CUDA: no split-K)"),
      FLOTILLA_KEY(train, grad_clip, "global gradient-norm clip; 0 disables"),
      FLOTILLA_KEY(train, log_every, "write a step record every N steps"),
      FLOTILLA_KEY(train, spike_factor, "skip a step whose loss exceeds spike_factor x running mean; 0 off"),
      FLOTILLA_KEY(train, logits_chunk_mb,
                   "MiB of LM-head logits computed at once (the fused head and loss); 0 = all B x T rows"),

      FLOTILLA_KEY(optim, lr, "peak learning rate"),
      FLOTILLA_KEY(optim, min_lr_ratio, "final lr as a fraction of lr (cosine, linear, wsd)"),
      FLOTILLA_KEY(optim, beta1, "AdamW beta1"),
      FLOTILLA_KEY(optim, beta2, "AdamW beta2"),
      FLOTILLA_KEY(optim, eps, "AdamW epsilon"),
      FLOTILLA_KEY(optim, weight_decay, "decoupled weight decay on 2-D weights (not biases or norms)"),
      FLOTILLA_KEY(optim, schedule, "constant | cosine | linear | wsd", "constant", "cosine", "linear",
                   "wsd"),
      FLOTILLA_KEY(optim, warmup_steps, "linear warmup steps from 0 to lr"),
      FLOTILLA_KEY(optim, decay_fraction, "wsd: fraction of steps spent in the final decay"),

      FLOTILLA_KEY(parallel, dp, "data-parallel degree"),
      FLOTILLA_KEY(parallel, tp, "tensor-parallel degree (innermost on the rank grid)"),
      FLOTILLA_KEY(parallel, pp, "pipeline-parallel stages"),
      FLOTILLA_KEY(parallel, zero, "ZeRO stage: 0, 1 (optimizer state sharded) or 2 (+ gradients)"),
      FLOTILLA_KEY(parallel, micro_batches, "pipeline micro-batches per step"),
      FLOTILLA_KEY(parallel, schedule, "pipeline schedule: gpipe | 1f1b", "gpipe", "1f1b"),
      FLOTILLA_KEY(parallel, backend, "collectives: auto | gloo | nccl", "auto", "gloo", "nccl"),
      FLOTILLA_KEY(parallel, timeout_s, "collective and rendezvous timeout in seconds"),
      FLOTILLA_KEY(parallel, bucket_mb,
                   "data-parallel gradient buckets: consecutive layers merged until at least this many MiB; 0 = "
                   "one bucket per layer"),
      FLOTILLA_KEY(parallel, overlap, "data parallelism: all-reduce gradient buckets while backward runs"),
      FLOTILLA_KEY(parallel, measure_links,
                   "measure the links between the run's nodes at its start (stored with the run): auto "
                   "(multi-node runs) | off",
                   "auto", "off"),

      FLOTILLA_KEY(checkpoint, every, "save every N steps; 0 = only at the end; \"auto\" = Daly's interval"),
      FLOTILLA_KEY(checkpoint, keep_last, "checkpoints kept (>= 1; the newest verified one is never purged)"),
      FLOTILLA_KEY(checkpoint, resume, "auto (newest verified), none, or a checkpoint directory"),
      FLOTILLA_KEY(checkpoint, preempt_grace_s, "on SIGTERM, save only if the last save took less than this"),
      FLOTILLA_KEY(checkpoint, save_final, "save a checkpoint after the last step"),
      FLOTILLA_KEY(checkpoint, export_hf,
                   "after the last step, also write a Hugging Face folder here (llama); \"\" off"),
      FLOTILLA_KEY(checkpoint, export_dtype,
                   "dtype of that folder: source (init_from's, else fp32) | bf16 | fp32", "source", "bf16",
                   "fp32"),
      FLOTILLA_KEY(checkpoint, export_peft, "LoRA: also write the adapter as a PEFT folder here at the end"),
      FLOTILLA_KEY(checkpoint, mtbi_s,
                   "every = \"auto\": the place's mean time between interruptions (s); 0 = the prior"),
      FLOTILLA_KEY(
          checkpoint, keep_best,
          "a task score whose best checkpoint keep_last never purges: auto | none | task/<task>/<score>"),

      FLOTILLA_KEY(eval, every, "validation loss every N steps; 0 = only at the end"),
      FLOTILLA_KEY(eval, batches, "validation micro-batches per evaluation"),
      FLOTILLA_KEY(eval, sample_every, "print a text sample every N steps; 0 off"),
      FLOTILLA_KEY(eval, sample_tokens, "tokens per sample"),
      FLOTILLA_KEY(eval, tasks,
                   "evaluation tasks run with the validation loss: \"[kind:]path[?option=value&...]; ...\""),
      FLOTILLA_KEY(eval, task_limit,
                   "examples (windows) per task at each evaluation, unless the task sets limit=; 0 all"),

      FLOTILLA_KEY(budget, max_usd, "stop with a checkpoint when the run's spend reaches this; 0 off"),
      FLOTILLA_KEY(budget, warn_fraction, "warn when spend reaches this fraction of max_usd"),
      FLOTILLA_KEY(budget, usd_per_hour, "price of the whole run's hardware per hour (0 = free / catalogue)"),
      FLOTILLA_KEY(budget, price_source, "pricing catalogue entry, e.g. \"local\" or \"aws:p5.48xlarge\""),
      FLOTILLA_KEY(budget, max_hours, "stop with a checkpoint after this wall time; 0 off"),
  };
  for (auto& key : k) {
    if (key.path() == "model.preset") key.choices = preset_choices();
    if (key.path() == "checkpoint.every") key.word = "auto";  // stored as kCheckpointEveryAuto
  }
  return k;
}

#undef FLOTILLA_KEY

std::string to_lower(std::string s) {
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

bool same_double(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

}  // namespace

KeyType ConfigKey::type() const {
  switch (storage) {
    case FieldStorage::kString:
      return KeyType::kString;
    case FieldStorage::kInt32:
    case FieldStorage::kInt64:
    case FieldStorage::kUint64:
      return KeyType::kInteger;
    case FieldStorage::kDouble:
      return KeyType::kFloat;
    case FieldStorage::kBool:
      return KeyType::kBoolean;
  }
  return KeyType::kString;
}

const std::vector<ConfigSectionInfo>& config_sections() {
  static const std::vector<ConfigSectionInfo> sections = {
      {"run", "identity of the run: name, directory, seed, device, threads and crash restarts"},
      {"model", "the architecture: a preset plus any dimension overridden, or a Hugging Face folder"},
      {"lora", "LoRA fine-tuning: low-rank adapters trained on a frozen model.init_from"},
      {"data", "where tokens come from: the synthetic demo corpus or llm.c token shards"},
      {"train", "batch geometry, step count, precision and the gradient guards"},
      {"optim", "AdamW and the learning-rate schedule"},
      {"parallel", "how the run is spread over ranks: dp x tp x pp, ZeRO, the pipeline"},
      {"checkpoint", "when checkpoints are written, how many are kept, and how a run resumes"},
      {"eval", "periodic validation loss, evaluation tasks and text samples"},
      {"budget", "spend and wall-time limits; the run stops with a checkpoint when one is reached"},
  };
  return sections;
}

const std::vector<ConfigKey>& config_keys() {
  static const std::vector<ConfigKey> keys = build_keys();
  return keys;
}

const ConfigKey* find_config_key(const std::string& path) {
  for (const auto& key : config_keys())
    if (key.path() == path) return &key;
  return nullptr;
}

const char* key_type_name(KeyType type) {
  switch (type) {
    case KeyType::kString:
      return "string";
    case KeyType::kInteger:
      return "integer";
    case KeyType::kFloat:
      return "float";
    case KeyType::kBoolean:
      return "boolean";
  }
  return "?";
}

void* field_ptr(const ConfigKey& key, RunConfig& config) { return key.field(config); }

const void* field_ptr(const ConfigKey& key, const RunConfig& config) {
  // The accessor only forms an address; it never writes.
  return key.field(const_cast<RunConfig&>(config));
}

std::string toml_quote(const std::string& text) {
  std::string out = "\"";
  for (unsigned char ch : text) {
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (ch < 0x20 || ch == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", ch);
          out += buf;
        } else {
          out += static_cast<char>(ch);
        }
    }
  }
  return out + "\"";
}

std::string format_toml_float(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, value);  // shortest round-trip form
  std::string s(buf, res.ptr);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string format_toml_value(const ConfigKey& key, const RunConfig& config) {
  const void* p = field_ptr(key, config);
  switch (key.storage) {
    case FieldStorage::kString:
      return toml_quote(*static_cast<const std::string*>(p));
    case FieldStorage::kInt32:
      return std::to_string(*static_cast<const int*>(p));
    case FieldStorage::kInt64:
      if (key.is_word(*static_cast<const int64_t*>(p))) return toml_quote(key.word);
      return std::to_string(*static_cast<const int64_t*>(p));
    case FieldStorage::kUint64:
      return std::to_string(*static_cast<const uint64_t*>(p));
    case FieldStorage::kDouble:
      return format_toml_float(*static_cast<const double*>(p));
    case FieldStorage::kBool:
      return *static_cast<const bool*>(p) ? "true" : "false";
  }
  return "";
}

std::vector<std::string> config_diff(const RunConfig& a, const RunConfig& b) {
  std::vector<std::string> out;
  for (const auto& key : config_keys()) {
    const void* pa = field_ptr(key, a);
    const void* pb = field_ptr(key, b);
    bool same = true;
    switch (key.storage) {
      case FieldStorage::kString:
        same = *static_cast<const std::string*>(pa) == *static_cast<const std::string*>(pb);
        break;
      case FieldStorage::kInt32:
        same = *static_cast<const int*>(pa) == *static_cast<const int*>(pb);
        break;
      case FieldStorage::kInt64:
        same = *static_cast<const int64_t*>(pa) == *static_cast<const int64_t*>(pb);
        break;
      case FieldStorage::kUint64:
        same = *static_cast<const uint64_t*>(pa) == *static_cast<const uint64_t*>(pb);
        break;
      case FieldStorage::kDouble:
        same = same_double(*static_cast<const double*>(pa), *static_cast<const double*>(pb));
        break;
      case FieldStorage::kBool:
        same = *static_cast<const bool*>(pa) == *static_cast<const bool*>(pb);
        break;
    }
    if (!same) out.push_back(key.path());
  }
  return out;
}

bool configs_equal(const RunConfig& a, const RunConfig& b) { return config_diff(a, b).empty(); }

int edit_distance(const std::string& a, const std::string& b) {
  // Optimal string alignment: insert, delete, substitute, swap of neighbours, each cost 1.
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<int>> d(n + 1, std::vector<int>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = static_cast<int>(i);
  for (size_t j = 0; j <= m; ++j) d[0][j] = static_cast<int>(j);
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const int cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[n][m];
}

std::optional<std::string> closest_match(const std::string& word,
                                         const std::vector<std::string>& candidates) {
  const std::string w = to_lower(word);
  const int threshold = std::clamp(static_cast<int>(w.size()) / 3, 1, 3);
  std::optional<std::string> best;
  int best_score = 1 << 30;
  for (const auto& cand : candidates) {
    const std::string c = to_lower(cand);
    const int d = edit_distance(w, c);
    const size_t shorter = std::min(w.size(), c.size());
    const bool prefix = shorter >= 3 && (c.rfind(w, 0) == 0 || w.rfind(c, 0) == 0);
    if (d > threshold && !prefix) continue;
    if (d < best_score) {
      best_score = d;
      best = cand;
    }
  }
  return best;
}

std::optional<std::string> suggest_key(const std::string& section, const std::string& name) {
  std::vector<std::string> same_section, all_paths;
  for (const auto& key : config_keys()) {
    all_paths.push_back(key.path());
    if (key.section == section) same_section.push_back(key.name);
  }
  if (auto m = closest_match(name, same_section)) return section + "." + *m;
  for (const auto& key : config_keys())
    if (key.name == name) return key.path();
  return closest_match(section.empty() ? name : section + "." + name, all_paths);
}

std::string config_key_list() {
  std::string out;
  for (const auto& key : config_keys())
    out += key.path() + " " + key_type_name(key.type()) +
           (key.word.empty() ? "" : " or \"" + key.word + "\"") + "\n";
  return out;
}

}  // namespace flotilla
