// validate(): every rule a RunConfig must satisfy, section by section, each problem with all of
// its factors spelled out; and the derived batch geometry.
//
// Decision: enumerated strings are checked from the schema's choices (one list for the reader,
// the docs and here), and numeric rules state the bound in the message rather than a code.
#include "engine/config/config_validate.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>

#include "engine/config/config_schema.h"
#include "engine/config/eval_tasks.h"
#include "engine/core/error.h"
#include "engine/interop/model_source.h"
#include "engine/model/gpt.h"
#include "engine/model/base_weights.h"
#include "engine/model/lora.h"
#include "engine/model/model_shard.h"

namespace flotilla {
namespace {

class Problems {
 public:
  void add(const std::string& path, const std::string& message) { list.push_back({path, message}); }
  std::vector<ConfigProblem> list;
};

std::string num(double v) { return format_toml_float(v); }
std::string num(int64_t v) { return std::to_string(v); }
std::string q(const std::string& s) { return toml_quote(s); }

void check_choices(const RunConfig& c, Problems& p) {
  for (const auto& key : config_keys()) {
    if (key.choices.empty()) continue;
    const auto& value = *static_cast<const std::string*>(field_ptr(key, c));
    bool ok = false;
    for (const auto& choice : key.choices) ok = ok || choice == value;
    if (ok) continue;
    std::string msg = "unknown value " + q(value);
    if (auto m = closest_match(value, key.choices)) msg += " (did you mean " + q(*m) + "?)";
    msg += "; one of ";
    for (size_t i = 0; i < key.choices.size(); ++i) msg += (i ? ", " : "") + key.choices[i];
    p.add(key.path(), msg);
  }
}

void at_least(Problems& p, const std::string& path, int64_t v, int64_t lo, const std::string& note = "") {
  if (v < lo) p.add(path, num(v) + " must be >= " + num(lo) + note);
}

void finite_at_least(Problems& p, const std::string& path, double v, double lo, bool strict,
                     const std::string& note = "") {
  if (!std::isfinite(v) || (strict ? v <= lo : v < lo))
    p.add(path, num(v) + " must be a finite number " + (strict ? "> " : ">= ") + num(lo) + note);
}

void check_run(const RunConfig& c, Problems& p) {
  const std::string& name = c.run.name;
  if (name.empty()) p.add("run.name", "must not be empty");
  for (size_t i = 0; i < name.size(); ++i) {
    const char ch = name[i];
    const bool ok = std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_' || ch == '.';
    if (!ok) {
      p.add("run.name", q(name) + " has " + q(std::string(1, ch)) + " at position " + std::to_string(i + 1) +
                            "; use letters, digits, '-', '_', '.'");
      break;
    }
  }
  if (!name.empty() && name[0] == '.') p.add("run.name", q(name) + " must not start with '.'");
  if (name.size() > 100) p.add("run.name", "is " + std::to_string(name.size()) + " characters; at most 100");
  at_least(p, "run.threads", c.run.threads, 0, " (0 = all cores)");
  at_least(p, "run.max_restarts", c.run.max_restarts, 0, " (0 = a crash fails the run)");
  if (c.run.seed > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    p.add("run.seed", std::to_string(c.run.seed) + " exceeds 2^63-1 (TOML integers are signed 64-bit)");
}

void check_model(const RunConfig& c, Problems& p) {
  const auto& m = c.model;
  at_least(p, "model.n_layer", m.n_layer, 1);
  at_least(p, "model.n_head", m.n_head, 1);
  at_least(p, "model.n_embd", m.n_embd, 1);
  const bool llama = m.arch == "llama";
  if (m.n_head >= 1 && m.n_embd >= 1 && m.n_embd % m.n_head != 0 && !(llama && m.head_dim > 0))
    p.add("model.n_head", std::to_string(m.n_head) + " does not divide model.n_embd " +
                              std::to_string(m.n_embd) + " (head size " + std::to_string(m.n_embd) + "/" +
                              std::to_string(m.n_head) + " is not whole" +
                              (llama ? "; or set model.head_dim" : "") + ")");
  if (llama) {
    at_least(p, "model.n_kv_head", m.n_kv_head, 0, " (0 = model.n_head)");
    at_least(p, "model.head_dim", m.head_dim, 0, " (0 = model.n_embd / model.n_head)");
    at_least(p, "model.ffn_dim", m.ffn_dim, 0, " (0 = 4 x model.n_embd)");
    const int kv = m.n_kv_head > 0 ? m.n_kv_head : m.n_head;
    if (m.n_head >= 1 && kv >= 1 && m.n_head % kv != 0)
      p.add("model.n_kv_head", std::to_string(kv) + " does not divide model.n_head " +
                                   std::to_string(m.n_head) +
                                   " (each K/V head serves n_head / n_kv_head query heads)");
    const int hd = m.head_dim > 0 ? m.head_dim : (m.n_head >= 1 ? m.n_embd / m.n_head : 0);
    if (hd > 0 && hd % 2 != 0)
      p.add("model.head_dim",
            std::to_string(hd) + " is odd; RoPE rotates pairs of dimensions, use an even width");
    if (!(m.norm_eps > 0) || !std::isfinite(m.norm_eps))
      p.add("model.norm_eps", num(m.norm_eps) + " must be finite and > 0");
    if (!(m.rope_theta > 1) || !std::isfinite(m.rope_theta))
      p.add("model.rope_theta", num(m.rope_theta) + " must be finite and > 1");
    if (m.rope_scaling != "default" && !(m.rope_factor >= 1))
      p.add("model.rope_factor",
            num(m.rope_factor) + " must be >= 1 with model.rope_scaling = " + q(m.rope_scaling));
    if (m.rope_scaling == "llama3") {
      if (!(m.rope_high_freq_factor > m.rope_low_freq_factor) || !(m.rope_low_freq_factor > 0))
        p.add("model.rope_high_freq_factor",
              "llama3 RoPE scaling needs 0 < model.rope_low_freq_factor < model.rope_high_freq_factor (got " +
                  num(m.rope_low_freq_factor) + " and " + num(m.rope_high_freq_factor) + ")");
      at_least(p, "model.rope_original_max_position", m.rope_original_max_position, 1);
    }
  } else {
    const RunConfig defaults;
    const auto& dm = defaults.model;
    const bool llama_keys =
        m.n_kv_head != dm.n_kv_head || m.head_dim != dm.head_dim || m.ffn_dim != dm.ffn_dim ||
        m.norm_eps != dm.norm_eps || m.tie_embeddings != dm.tie_embeddings || m.qkv_bias != dm.qkv_bias ||
        m.qk_norm != dm.qk_norm || m.rope_theta != dm.rope_theta || m.rope_scaling != dm.rope_scaling ||
        m.rope_factor != dm.rope_factor || m.rope_low_freq_factor != dm.rope_low_freq_factor ||
        m.rope_high_freq_factor != dm.rope_high_freq_factor ||
        m.rope_original_max_position != dm.rope_original_max_position;
    if (llama_keys)
      p.add("model.arch",
            q(m.arch) +
                " has no use for the llama: keys set in [model] (n_kv_head, head_dim, ffn_dim, "
                "norm_eps, tie_embeddings, qkv_bias, qk_norm, rope_*); set model.arch = \"llama\" or "
                "remove them");
  }
  if (m.vocab_size < 2 || m.vocab_size > (1 << 30))
    p.add("model.vocab_size", std::to_string(m.vocab_size) + " must be between 2 and 1073741824");
  at_least(p, "model.max_seq_len", m.max_seq_len, 1);
  const auto ends_with = [&](const std::string& s) {
    return m.init_from.size() >= s.size() &&
           m.init_from.compare(m.init_from.size() - s.size(), s.size(), s) == 0;
  };
  if (!c.checkpoint.export_hf.empty() && m.arch != "llama")
    p.add("checkpoint.export_hf",
          "Hugging Face export at the end is for model.arch = \"llama\"; for GPT-2 run "
          "`flotilla-worker export --format safetensors` on the final checkpoint");
  if (!c.checkpoint.export_hf.empty() && !c.checkpoint.save_final)
    p.add("checkpoint.export_hf",
          "needs checkpoint.save_final = true (the folder is written from the final checkpoint)");
  // Anything else names a Hugging Face folder (config.json + safetensors), read at start.
  // A Hub name (org/name[@revision]) is resolved in the cache, or downloaded, where the run starts.
  if (!m.init_from.empty() && !ends_with(".safetensors") && !ends_with(".bin") &&
      !interop::is_hub_name(m.init_from)) {
    std::error_code ec;
    const bool dir = std::filesystem::is_directory(m.init_from, ec);
    if (!dir)
      p.add("model.init_from",
            q(m.init_from) +
                " is not a folder, a .safetensors file or an llm.c .bin model; give a Hugging Face "
                "model folder (config.json + safetensors weights), a Hub name org/name[@revision] "
                "(e.g. HuggingFaceTB/SmolLM2-135M) or a weights file");
    else if (!std::filesystem::is_regular_file(std::filesystem::path(m.init_from) / "config.json", ec))
      p.add("model.init_from", q(m.init_from) + " has no config.json; a Hugging Face model folder needs one");
    else if (m.arch == "gpt2")
      p.add("model.init_from", q(m.init_from) +
                                   " is a Hugging Face folder; its config.json sets model.arch "
                                   "(run the worker's train or plan, which read it)");
  }
}

// [lora]: each bad value by its key, before anything starts (a plan needs no weights to freeze).
void check_lora(const RunConfig& c, Problems& p, ValidateFor purpose) {
  const LoraSection& l = c.lora;
  if (!l.enabled) {
    if (!l.init_from.empty())
      p.add("lora.init_from", q(l.init_from) +
                                  " is set but lora.enabled = false; set lora.enabled = true to "
                                  "continue training that adapter, or clear lora.init_from");
    if (!c.checkpoint.export_peft.empty())
      p.add("checkpoint.export_peft",
            "writes a LoRA adapter, but lora.enabled = false; set lora.enabled = true or clear it");
    if (l.base_quant != "none")
      p.add("lora.base_quant", q(l.base_quant) +
                                   " quantises LoRA's frozen base (QLoRA), but lora.enabled = false; set "
                                   "lora.enabled = true, or lora.base_quant = \"none\" to train every weight");
    return;
  }
  if (c.model.arch != "llama")
    p.add("lora.enabled",
          "LoRA adapters train the Llama family (model.arch = \"llama\", e.g. a Hugging Face "
          "folder as model.init_from), not " +
              q(c.model.arch));
  if (c.model.init_from.empty() && purpose == ValidateFor::kTrain)
    p.add("lora.enabled",
          "LoRA trains adapters on frozen weights, so it needs model.init_from (a Hugging Face folder, "
          "e.g. a Llama, Qwen or SmolLM2 model); without it the base would be random");
  if (l.rank < 1) p.add("lora.rank", num(int64_t{l.rank}) + " must be at least 1 (typical: 8 to 64)");
  const int widest = std::min(
      {c.model.n_embd, c.model.arch == "llama" && c.model.ffn_dim > 0 ? c.model.ffn_dim : c.model.n_embd});
  if (l.rank >= 1 && widest >= 1 && l.rank > widest)
    p.add("lora.rank", num(int64_t{l.rank}) + " exceeds the model width " + num(int64_t{widest}) +
                           "; a low-rank adapter needs rank < width");
  finite_at_least(p, "lora.alpha", l.alpha, 0.0, true, " (the scaling is alpha / rank)");
  if (!std::isfinite(l.dropout) || l.dropout < 0.0 || l.dropout >= 1.0)
    p.add("lora.dropout", num(l.dropout) + " must be in [0, 1)");
  try {
    (void)parse_lora_targets(l.targets);
  } catch (const Error& e) {
    std::string msg = e.what();
    const std::string prefix = "lora.targets";
    if (msg.compare(0, prefix.size(), prefix) == 0) msg = msg.substr(prefix.size());
    while (!msg.empty() && (msg[0] == ':' || msg[0] == ' ')) msg.erase(0, 1);
    p.add("lora.targets", msg);
  }
  if (l.base_quant != "none" && l.base_quant != "nf4")
    p.add("lora.base_quant", q(l.base_quant) + " is not a base quantisation; use \"none\" or \"nf4\" (QLoRA)");
  // QLoRA's blocks of 64 along each projection's rows, cut on block boundaries by tensor
  // parallelism: checked on shapes the model keys already accept (their own problems come first).
  if (l.base_quant == "nf4" && c.model.arch == "llama" && c.model.n_embd >= 1 && c.model.n_head >= 1 &&
      c.model.n_layer >= 1 && c.model.vocab_size >= 2 && c.parallel.tp >= 1) {
    ModelDims d;
    bool shaped = true;
    try {
      d = dims_from_config(c.model);
    } catch (const Error&) {
      shaped = false;
    }
    if (shaped && dims_problem(d).empty() && tp_problem(d, c.parallel.tp).empty()) {
      if (const std::string whole = nf4_layout_problem(d, 1); !whole.empty())
        p.add("lora.base_quant", whole);
      else if (const std::string cut = nf4_layout_problem(d, c.parallel.tp); !cut.empty())
        p.add("parallel.tp", cut);
    }
  }
  if (!l.init_from.empty() && !interop::is_hub_name(l.init_from)) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(std::filesystem::path(l.init_from) / "adapter_config.json", ec))
      p.add("lora.init_from", q(l.init_from) +
                                  " has no adapter_config.json; give a PEFT adapter folder "
                                  "(adapter_config.json + adapter_model.safetensors) or a Hub name "
                                  "org/name[@revision]");
  }
  if (!c.checkpoint.export_peft.empty() && !c.checkpoint.save_final)
    p.add("checkpoint.export_peft",
          "needs checkpoint.save_final = true (the adapter is written from the final checkpoint)");
}

void check_data(const RunConfig& c, Problems& p) {
  const auto& d = c.data;
  if (d.source == "shards" && d.train.empty())
    p.add("data.train", "data.source = \"shards\" needs a path or glob of train shards");
  // Shards named while the source is the synthetic corpus would be ignored in silence: the run would
  // train and evaluate on the demo corpus while the user believes it reads their data.
  if (d.source == "synthetic" && !d.train.empty())
    p.add("data.train", "is set, but data.source is \"synthetic\": the run would train on the synthetic demo "
                        "corpus and ignore it; set data.source = \"shards\" (or remove data.train)");
  if (d.source == "synthetic" && d.train.empty() && !d.val.empty())
    p.add("data.val", "is set, but data.source is \"synthetic\": it would be ignored; set data.source = "
                      "\"shards\" and data.train (or remove data.val)");
  // Evaluation tasks (eval.tasks) need no validation shards: eval.every then times the tasks alone.
  if (d.source == "shards" && d.val.empty() && c.eval.every > 0 &&
      c.eval.tasks.find_first_not_of(" ;") == std::string::npos)
    p.add("eval.every", num(c.eval.every) +
                            " asks for validation loss but data.val is empty; set data.val or "
                            "eval.every = 0 (or list eval.tasks, which need no validation data)");
  if (d.source == "synthetic" && c.train.micro_batch >= 1 && c.train.seq_len >= 1 && c.parallel.dp >= 1) {
    const int64_t bt = int64_t{c.train.micro_batch} * c.train.seq_len;
    const int64_t need = bt * c.parallel.dp + 1;
    if (d.synthetic_tokens < need)
      p.add("data.synthetic_tokens",
            num(d.synthetic_tokens) + " is fewer than one micro-batch per rank: " + "train.micro_batch " +
                num(int64_t{c.train.micro_batch}) + " x train.seq_len " + num(int64_t{c.train.seq_len}) +
                " x parallel.dp " + num(int64_t{c.parallel.dp}) + " + 1 = " + num(need));
    else if (d.synthetic_tokens / 10 < bt + 1)
      p.add("data.synthetic_tokens",
            num(d.synthetic_tokens) + " leaves " + num(d.synthetic_tokens / 10) +
                " validation tokens (1/10), fewer than one micro-batch: train.micro_batch " +
                num(int64_t{c.train.micro_batch}) + " x train.seq_len " + num(int64_t{c.train.seq_len}) +
                " + 1 = " + num(bt + 1));
  }
}

void check_train(const RunConfig& c, Problems& p) {
  const auto& t = c.train;
  at_least(p, "train.steps", t.steps, 1);
  at_least(p, "train.micro_batch", t.micro_batch, 1);
  at_least(p, "train.seq_len", t.seq_len, 1);
  if (t.seq_len > c.model.max_seq_len && c.model.max_seq_len >= 1)
    p.add("train.seq_len",
          std::to_string(t.seq_len) + " exceeds model.max_seq_len " + std::to_string(c.model.max_seq_len));
  at_least(p, "train.global_batch_tokens", t.global_batch_tokens, 0, " (0 = one micro-batch per rank)");
  if (t.global_batch_tokens > 0 && t.micro_batch >= 1 && t.seq_len >= 1 && c.parallel.dp >= 1) {
    const int64_t unit = int64_t{t.micro_batch} * t.seq_len * c.parallel.dp;
    if (t.global_batch_tokens % unit != 0)
      p.add("train.global_batch_tokens",
            num(t.global_batch_tokens) + " is not a multiple of train.micro_batch " +
                num(int64_t{t.micro_batch}) + " x train.seq_len " + num(int64_t{t.seq_len}) +
                " x parallel.dp " + num(int64_t{c.parallel.dp}) + " = " + num(unit));
  }
  // bf16 runs on both devices; whether this CPU has bf16 instructions is the backend's to say, at
  // run time (CpuBackend::set_matmul_dtype): a config may be validated on another machine.
  finite_at_least(p, "train.grad_clip", t.grad_clip, 0, false, " (0 disables clipping)");
  at_least(p, "train.log_every", t.log_every, 1);
  if (!std::isfinite(t.spike_factor) || (t.spike_factor != 0 && t.spike_factor <= 1))
    p.add("train.spike_factor", num(t.spike_factor) + " must be 0 (off) or a finite number > 1");
  finite_at_least(p, "train.logits_chunk_mb", t.logits_chunk_mb, 0, false, " (0 = the whole logits at once)");
}

void check_optim(const RunConfig& c, Problems& p) {
  const auto& o = c.optim;
  finite_at_least(p, "optim.lr", o.lr, 0, true);
  if (!(o.min_lr_ratio >= 0 && o.min_lr_ratio <= 1))
    p.add("optim.min_lr_ratio", num(o.min_lr_ratio) + " must be in [0, 1]");
  if (!(o.beta1 >= 0 && o.beta1 < 1)) p.add("optim.beta1", num(o.beta1) + " must be in [0, 1)");
  if (!(o.beta2 >= 0 && o.beta2 < 1)) p.add("optim.beta2", num(o.beta2) + " must be in [0, 1)");
  finite_at_least(p, "optim.eps", o.eps, 0, true);
  finite_at_least(p, "optim.weight_decay", o.weight_decay, 0, false);
  at_least(p, "optim.warmup_steps", o.warmup_steps, 0);
  // warmup_steps > train.steps is allowed: a shortened run (--set train.steps=5) just stays in
  // warmup, as the schedule defines (lr_schedule.h); only impossible values are problems.
  if (!(o.decay_fraction >= 0 && o.decay_fraction <= 1))
    p.add("optim.decay_fraction", num(o.decay_fraction) + " must be in [0, 1]");
}

void check_parallel(const RunConfig& c, Problems& p, int world_size) {
  const auto& par = c.parallel;
  at_least(p, "parallel.dp", par.dp, 1);
  at_least(p, "parallel.tp", par.tp, 1);
  at_least(p, "parallel.pp", par.pp, 1);
  at_least(p, "parallel.micro_batches", par.micro_batches, 1);
  if (par.zero < 0 || par.zero > 2)
    p.add("parallel.zero", std::to_string(par.zero) + " is not a ZeRO stage this engine has (0, 1 or 2)");
  if (par.tp >= 1 && c.model.n_head >= 1 && c.model.n_head % par.tp != 0)
    p.add("parallel.tp", "parallel.tp=" + std::to_string(par.tp) +
                             " does not divide model.n_head=" + std::to_string(c.model.n_head) +
                             " (heads are split across tensor-parallel ranks)");
  if (c.model.arch == "llama" && par.tp >= 1) {
    const int kv = c.model.n_kv_head > 0 ? c.model.n_kv_head : c.model.n_head;
    if (kv >= 1 && c.model.n_head >= 1 && c.model.n_head % par.tp == 0 && kv % par.tp != 0)
      p.add("parallel.tp", "parallel.tp=" + std::to_string(par.tp) +
                               " does not divide model.n_kv_head=" + std::to_string(kv) +
                               " (each tensor-parallel rank holds whole K/V heads; use a tp "
                               "that divides " +
                               std::to_string(kv) + ")");
    const int ffn = c.model.ffn_dim > 0 ? c.model.ffn_dim : 4 * c.model.n_embd;
    if (ffn >= 1 && ffn % par.tp != 0)
      p.add("parallel.tp", "parallel.tp=" + std::to_string(par.tp) +
                               " does not divide model.ffn_dim=" + std::to_string(ffn) +
                               " (the MLP's columns are split across tensor-parallel ranks)");
  }
  if (par.tp >= 1 && c.model.vocab_size >= 2 && pad_vocab(c.model.vocab_size) % par.tp != 0)
    p.add("parallel.tp", "parallel.tp=" + std::to_string(par.tp) + " does not divide the padded vocabulary " +
                             std::to_string(pad_vocab(c.model.vocab_size)) + " (model.vocab_size " +
                             std::to_string(c.model.vocab_size) + " rounded up to a multiple of 128)");
  if (par.pp > c.model.n_layer && c.model.n_layer >= 1)
    p.add("parallel.pp", "parallel.pp=" + std::to_string(par.pp) + " exceeds model.n_layer=" +
                             std::to_string(c.model.n_layer) + " (each stage needs at least one block)");
  if (par.zero == 2 && par.pp > 1)
    p.add("parallel.zero",
          "ZeRO-2 (sharded gradients) cannot be combined with parallel.pp=" + std::to_string(par.pp) +
              ": gradients accumulate over the pipeline's micro-batches; "
              "use parallel.zero = 1");
  const int64_t accum = grad_accum_steps(c);
  if (par.pp > 1 && par.micro_batches >= 1 && accum >= 1 && accum % par.micro_batches != 0)
    p.add("parallel.micro_batches",
          "parallel.micro_batches=" + std::to_string(par.micro_batches) + " does not divide the " +
              num(accum) + " micro-batches per rank per step (tokens per step " + num(tokens_per_step(c)) +
              " / (train.micro_batch x train.seq_len x parallel.dp))");
  if (par.pp == 1 && par.micro_batches > 1)
    p.add("parallel.micro_batches", "parallel.micro_batches=" + std::to_string(par.micro_batches) +
                                        " has no effect with parallel.pp=1; set it to 1 and use "
                                        "train.global_batch_tokens for gradient accumulation");
  if ((par.tp > 1 || par.pp > 1) && c.eval.sample_every > 0)
    p.add("eval.sample_every", num(c.eval.sample_every) +
                                   " asks for text samples, which need the whole model on one rank; "
                                   "parallel.tp=" +
                                   std::to_string(par.tp) + " x parallel.pp=" + std::to_string(par.pp) +
                                   " splits it: set eval.sample_every = 0 and sample from a checkpoint "
                                   "(flotilla-worker sample gathers the shards)");
  finite_at_least(p, "parallel.timeout_s", par.timeout_s, 0, true);
  finite_at_least(p, "parallel.bucket_mb", par.bucket_mb, 0, false);
  if (par.bucket_mb > 0 && par.zero >= 1)
    p.add("parallel.bucket_mb",
          "gradient buckets apply to parallel.zero = 0 only (zero = 1 reduce-scatters every "
          "gradient in one call, zero = 2 stages one layer at a time): set bucket_mb = 0");
  if (par.backend == "nccl" && c.run.device != "cuda")
    p.add("parallel.backend",
          "nccl needs run.device = \"cuda\" (it is " + q(c.run.device) + "); use gloo or auto");
  if (world_size > 0 && par.dp >= 1 && par.tp >= 1 && par.pp >= 1) {
    const int64_t ranks = int64_t{par.dp} * par.tp * par.pp;
    if (ranks != world_size) {
      std::string msg = "dp*tp*pp = " + std::to_string(par.dp) + "*" + std::to_string(par.tp) + "*" +
                        std::to_string(par.pp) + " = " + num(ranks) + " does not equal the world size " +
                        std::to_string(world_size);
      msg += world_size == 1 ? " (a single process; start " + num(ranks) +
                                   " ranks with flotilla-worker launch --nproc-per-node " + num(ranks) + ")"
                             : " (ranks started by launch)";
      p.add("parallel", msg);
    }
  }
}

void check_rest(const RunConfig& c, Problems& p) {
  if (c.checkpoint.every != kCheckpointEveryAuto)
    at_least(p, "checkpoint.every", c.checkpoint.every, 0, " (0 = only at the end, or \"auto\")");
  finite_at_least(p, "checkpoint.mtbi_s", c.checkpoint.mtbi_s, 0, false, " (0 = the worker's prior)");
  at_least(p, "checkpoint.keep_last", c.checkpoint.keep_last, 1);
  if (c.checkpoint.resume.empty())
    p.add("checkpoint.resume", "must be \"auto\", \"none\" or a checkpoint directory, not empty");
  finite_at_least(p, "checkpoint.preempt_grace_s", c.checkpoint.preempt_grace_s, 0, false);
  at_least(p, "eval.every", c.eval.every, 0, " (0 = only at the end)");
  at_least(p, "eval.batches", c.eval.batches, 1);
  at_least(p, "eval.sample_every", c.eval.sample_every, 0, " (0 = off)");
  at_least(p, "eval.sample_tokens", c.eval.sample_tokens, 1);
  for (auto& [path, message] : eval_task_problems(c)) p.add(path, message);
  const auto& b = c.budget;
  finite_at_least(p, "budget.max_usd", b.max_usd, 0, false, " (0 = no limit)");
  if (!(b.warn_fraction > 0 && b.warn_fraction <= 1))
    p.add("budget.warn_fraction", num(b.warn_fraction) + " must be in (0, 1]");
  finite_at_least(p, "budget.usd_per_hour", b.usd_per_hour, 0, false);
  finite_at_least(p, "budget.max_hours", b.max_hours, 0, false, " (0 = no limit)");
  if (b.max_usd > 0 && b.usd_per_hour == 0 && b.price_source.empty())
    p.add("budget.max_usd",
          num(b.max_usd) + " needs a price: set budget.usd_per_hour or budget.price_source");
}

}  // namespace

std::string to_string(const ConfigProblem& problem) { return problem.path + ": " + problem.message; }

std::vector<ConfigProblem> validate(const RunConfig& config, int world_size, ValidateFor purpose) {
  Problems p;
  check_choices(config, p);
  check_run(config, p);
  check_model(config, p);
  check_lora(config, p, purpose);
  check_data(config, p);
  check_train(config, p);
  check_optim(config, p);
  check_parallel(config, p, world_size);
  check_rest(config, p);
  return p.list;
}

void validate_or_throw(const RunConfig& config, int world_size, ValidateFor purpose) {
  const auto problems = validate(config, world_size, purpose);
  if (problems.empty()) return;
  std::string msg = "the run config has " + std::to_string(problems.size()) +
                    (problems.size() == 1 ? " problem:" : " problems:");
  for (const auto& pr : problems) msg += "\n  " + to_string(pr);
  throw_config(msg);
}

int64_t tokens_per_step(const RunConfig& c) {
  if (c.train.global_batch_tokens > 0) return c.train.global_batch_tokens;
  const int64_t per_rank = c.parallel.pp > 1 ? c.parallel.micro_batches : 1;
  return int64_t{c.train.micro_batch} * c.train.seq_len * c.parallel.dp * per_rank;
}

int64_t grad_accum_steps(const RunConfig& c) {
  const int64_t unit = int64_t{c.train.micro_batch} * c.train.seq_len * c.parallel.dp;
  return unit > 0 ? tokens_per_step(c) / unit : 0;
}

std::string resolved_out_dir(const RunConfig& c) {
  return c.run.out_dir.empty() ? "runs/" + c.run.name : c.run.out_dir;
}

}  // namespace flotilla
