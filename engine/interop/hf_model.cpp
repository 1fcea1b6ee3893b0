// Llama-family tensors between a Hugging Face folder and the engine's layout (see hf_model.h).
#include "engine/interop/hf_model.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/interop/bnb.h"
#include "engine/interop/hf_checkpoint.h"
#include "engine/interop/hf_writer.h"
#include "engine/interop/model_source.h"
#include "engine/model/llama.h"
#include "engine/model/param_layout.h"

namespace flotilla::interop {
namespace {

namespace fs = std::filesystem;
using I64 = std::vector<int64_t>;

// One HF tensor as a run of rows inside one of our tensors: rows [row0, row0 + rows) of layer l's
// slice of `tensor`, each `cols` wide (l = -1 for a non-layer tensor).
struct Piece {
  std::string name;
  int tensor = 0;
  int layer = -1;
  size_t row0 = 0, rows = 0, cols = 1;
  I64 shape;  // as HF stores it
};

std::vector<Piece> pieces(const ModelDims& d) {
  const size_t C = static_cast<size_t>(d.n_embd), Q = static_cast<size_t>(d.q_dim());
  const size_t KV = static_cast<size_t>(d.kv_dim()), F = static_cast<size_t>(d.ffn());
  const size_t V = static_cast<size_t>(d.vocab_size), hd = static_cast<size_t>(d.hd());
  auto i64 = [](size_t v) { return static_cast<int64_t>(v); };
  std::vector<Piece> out;
  out.push_back({"model.embed_tokens.weight", llama::kEmbed, -1, 0, V, C, {i64(V), i64(C)}});
  for (int l = 0; l < d.n_layer; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    out.push_back({p + "input_layernorm.weight", llama::kAttnNorm, l, 0, C, 1, {i64(C)}});
    out.push_back({p + "self_attn.q_proj.weight", llama::kQkv, l, 0, Q, C, {i64(Q), i64(C)}});
    out.push_back({p + "self_attn.k_proj.weight", llama::kQkv, l, Q, KV, C, {i64(KV), i64(C)}});
    out.push_back({p + "self_attn.v_proj.weight", llama::kQkv, l, Q + KV, KV, C, {i64(KV), i64(C)}});
    if (d.qkv_bias) {
      out.push_back({p + "self_attn.q_proj.bias", llama::kQkvBias, l, 0, Q, 1, {i64(Q)}});
      out.push_back({p + "self_attn.k_proj.bias", llama::kQkvBias, l, Q, KV, 1, {i64(KV)}});
      out.push_back({p + "self_attn.v_proj.bias", llama::kQkvBias, l, Q + KV, KV, 1, {i64(KV)}});
    }
    if (d.qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", llama::kQNorm, l, 0, hd, 1, {i64(hd)}});
      out.push_back({p + "self_attn.k_norm.weight", llama::kKNorm, l, 0, hd, 1, {i64(hd)}});
    }
    out.push_back({p + "self_attn.o_proj.weight", llama::kAttnOut, l, 0, C, Q, {i64(C), i64(Q)}});
    out.push_back({p + "post_attention_layernorm.weight", llama::kMlpNorm, l, 0, C, 1, {i64(C)}});
    out.push_back({p + "mlp.gate_proj.weight", llama::kGateUp, l, 0, F, C, {i64(F), i64(C)}});
    out.push_back({p + "mlp.up_proj.weight", llama::kGateUp, l, F, F, C, {i64(F), i64(C)}});
    out.push_back({p + "mlp.down_proj.weight", llama::kDown, l, 0, C, F, {i64(C), i64(F)}});
  }
  out.push_back({"model.norm.weight", llama::kFinalNorm, -1, 0, C, 1, {i64(C)}});
  if (!d.tied_embeddings) out.push_back({"lm_head.weight", llama::kLmHead, -1, 0, V, C, {i64(V), i64(C)}});
  return out;
}

// Where a piece lives in the full parameter vector.
size_t piece_offset(const ParamLayout& layout, const Piece& p) {
  size_t base = 0;
  for (int i = 0; i < p.tensor; ++i) base += layout.full_size(i);
  const TensorSpec& t = layout[p.tensor];
  if (p.layer >= 0) base += static_cast<size_t>(p.layer) * t.rows * t.cols;
  return base + p.row0 * p.cols;
}

// config.json's model_type, or "" (read_hf_config refuses the types it does not know).
std::string read_hf_model_type(const std::string& folder_or_name) {
  const std::string folder = local_model_folder(folder_or_name, "model.init_from", hub::FileSet::kConfigOnly);
  std::ifstream in(fs::path(folder) / "config.json");
  std::stringstream text;
  text << in.rdbuf();
  const auto j = nlohmann::json::parse(text.str(), nullptr, false);
  if (j.is_object() && j.contains("model_type") && j["model_type"].is_string())
    return j["model_type"].get<std::string>();
  return "";
}

// A NaN or Inf weight gives a non-finite loss at every step (each update is then skipped): refuse
// the folder here, naming the tensor, rather than train a run that cannot learn.
void check_finite(const std::string& folder, const Piece& p, const float* x) {
  size_t bad = 0, first = 0;
  for (size_t i = 0, n = p.rows * p.cols; i < n; ++i)
    if (!std::isfinite(x[i]) && bad++ == 0) first = i;
  if (bad > 0)
    throw_data(folder + ": tensor " + p.name + " holds " + std::to_string(bad) + " NaN or Inf value(s) of " +
               std::to_string(p.rows * p.cols) + " (the first at element " + std::to_string(first) +
               "); these weights cannot train: re-download or re-export the model");
}

// The base module (LoraTarget) a projection piece is.
int module_of(const ModelDims& d, const Piece& p) {
  int m = 0;
  while (m < kBaseModules &&
         (base_module(d, m).tensor != p.tensor || static_cast<size_t>(base_module(d, m).row0) != p.row0))
    ++m;
  return m;
}

// Refuses a folder with tensors the model does not account for (a tied head's lm_head is ignored).
void refuse_unread(const std::string& folder, const ModelDims& d, const HfCheckpoint& ck) {
  if (d.tied_embeddings && ck.find("lm_head.weight") != nullptr) ck.mark_read("lm_head.weight");
  const std::vector<std::string> extra = ck.unread();
  if (extra.empty()) return;
  std::string names;
  for (size_t i = 0; i < extra.size() && i < 8; ++i) names += (i ? ", " : "") + extra[i];
  if (extra.size() > 8) names += ", ... (" + std::to_string(extra.size()) + " in all)";
  throw_data(folder + ": tensors the model described by its config.json does not have: " + names +
             "; check config.json (architecture, tie_word_embeddings, attention_bias) against the weights");
}

}  // namespace

std::vector<HfTensorSpan> hf_tensor_spans(const ModelDims& d) {
  const ParamLayout layout(d);
  std::vector<HfTensorSpan> out;
  for (const Piece& p : pieces(d)) out.push_back({p.name, p.shape, piece_offset(layout, p), p.rows * p.cols});
  return out;
}

bool is_hf_folder(const std::string& path) {
  if (is_hub_name(path)) return true;  // the readers resolve it (model_source.h)
  std::error_code ec;
  return !path.empty() && fs::is_directory(path, ec) &&
         fs::is_regular_file(fs::path(path) / "config.json", ec);
}

std::string source_dtype(const std::string& init_from, std::string* why) {
  if (is_hf_folder(init_from)) {
    std::string dtype;
    try {
      dtype = read_hf_config(init_from).dtype;
    } catch (const Error&) {  // unreadable: the run's own dtype below
    }
    if (dtype == "bfloat16" || dtype == "float32") {
      if (why) *why = "the dtype of " + init_from;
      return dtype == "bfloat16" ? "bf16" : "fp32";
    }
  }
  if (why) *why = "the dtype of the checkpoint's weights";
  return "fp32";
}

ModelSection hf_model_section(const HfConfig& c) {
  if (c.o_bias)
    throw_config(c.model_type +
                 " config.json: attention_bias = true puts a bias on o_proj, which the engine's "
                 "llama architecture does not have (only q/k/v biases, as Qwen 2)");
  ModelSection m;
  m.preset = "custom";
  m.arch = "llama";
  m.n_layer = static_cast<int>(c.num_hidden_layers);
  m.n_head = static_cast<int>(c.num_attention_heads);
  m.n_kv_head = static_cast<int>(c.num_key_value_heads);
  m.head_dim = static_cast<int>(c.head_dim);
  m.n_embd = static_cast<int>(c.hidden_size);
  m.ffn_dim = static_cast<int>(c.intermediate_size);
  m.vocab_size = static_cast<int>(c.vocab_size);
  m.max_seq_len = static_cast<int>(c.max_position_embeddings > 0 ? c.max_position_embeddings : 2048);
  m.norm_eps = c.rms_norm_eps;
  m.tie_embeddings = c.tie_word_embeddings;
  m.qkv_bias = c.qkv_bias;
  m.qk_norm = c.qk_norm;
  m.rope_theta = c.rope.theta;
  m.rope_scaling = c.rope.type;
  m.rope_factor = c.rope.factor;
  m.rope_low_freq_factor = c.rope.low_freq_factor;
  m.rope_high_freq_factor = c.rope.high_freq_factor;
  if (c.rope.original_max_position_embeddings > 0)
    m.rope_original_max_position = static_cast<int>(c.rope.original_max_position_embeddings);
  return m;
}

bool apply_hf_init_from(RunConfig& cfg) {
  const std::string given = cfg.model.init_from;
  if (!is_hf_folder(given)) return false;
  // A Hub name: its config.json is enough for the shape (the weights are fetched where the run
  // trains), and the name is pinned to the commit read, so every later reader loads the same bytes.
  std::string pinned;
  const std::string init_from = resolve_and_pin(given, "model.init_from", hub::FileSet::kConfigOnly, &pinned);
  if (read_hf_model_type(init_from) == "gpt2")
    throw_config("model.init_from = \"" + given + "\" is a GPT-2 folder; GPT-2 weights load by file: set " +
                 "model.init_from = \"" + (fs::path(init_from) / "model.safetensors").string() + "\"");
  cfg.model = hf_model_section(read_hf_config(init_from));
  cfg.model.init_from = pinned;
  return true;
}

std::vector<float> import_hf_weights(const std::string& folder_or_name, const ModelDims& d) {
  const std::string folder = local_model_folder(folder_or_name, "model.init_from");
  if (!d.llama())
    throw_config(folder + ": Hugging Face folders load into model.arch = \"llama\" (this config has \"" +
                 arch_name(d.arch) + "\"); for GPT-2 give the folder's model.safetensors as model.init_from");
  if (has_quantization_config(folder))
    throw_config(folder +
                 " holds a quantised model (config.json has a quantization_config): it loads only as "
                 "the frozen base of QLoRA; set lora.enabled = true and lora.base_quant = \"nf4\", or use "
                 "the unquantised folder it was made from");
  const ParamLayout layout(d);
  std::vector<float> full(layout.full_params(), 0.0f);
  const HfCheckpoint ck(folder);
  for (const Piece& p : pieces(d)) {
    float* dst = full.data() + piece_offset(layout, p);
    ck.read_f32(p.name, dst, p.shape);
    check_finite(folder, p, dst);
  }
  refuse_unread(folder, d, ck);
  return full;
}

BaseWeights load_hf_base(const std::string& folder_or_name, const ModelDims& d, bool nf4, bool double_quant,
                         int layer_begin, int layer_end) {
  const std::string folder = local_model_folder(folder_or_name, "model.init_from");
  if (!d.llama())
    throw_config(folder + ": Hugging Face folders load into model.arch = \"llama\" (this config has \"" +
                 arch_name(d.arch) + "\")");
  const ParamLayout layout(d);
  BaseWeights b;
  b.dims = d;
  b.nf4 = nf4;
  b.double_quant = double_quant;
  b.layer_begin = nf4 ? layer_begin : 0;
  b.layer_end = nf4 && layer_end >= 0 ? layer_end : d.n_layer;
  b.dense.resize(static_cast<size_t>(layout.size()));
  for (int i = 0; i < layout.size(); ++i)
    if (!nf4 || !is_projection_tensor(i)) b.dense[static_cast<size_t>(i)].assign(layout.full_size(i), 0.0f);
  if (nf4) b.modules.resize(static_cast<size_t>((b.layer_end - b.layer_begin) * kBaseModules));
  const HfCheckpoint ck(folder);
  // A folder saved by transformers with a bitsandbytes 4-bit quantization_config: its projections
  // are taken as stored (bnb.h), so it is the same model bit for bit.
  std::unique_ptr<BnbFolder> bnb;
  if (has_quantization_config(folder)) {
    bnb = std::make_unique<BnbFolder>(folder, ck);
    if (nf4 && bnb->config().double_quant != double_quant)
      throw_config(folder + " was saved by bitsandbytes with bnb_4bit_use_double_quant = " +
                   (bnb->config().double_quant ? "true" : "false") + " (" + bnb->config().config_path +
                   "), but lora.double_quant = " + (double_quant ? "true" : "false") +
                   "; set lora.double_quant = " + (bnb->config().double_quant ? "true" : "false") +
                   " to train over its weights as stored");
  }
  std::vector<float> module;  // the one projection in flight
  for (const Piece& p : pieces(d)) {
    if (bnb && bnb->quantized(p.name)) {
      if (nf4 && !b.holds_layer(p.layer)) {  // another pipeline stage's
        for (const char* part : {"", ".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map",
                                 ".quant_state.bitsandbytes__nf4"})
          if (ck.find(p.name + part) != nullptr) ck.mark_read(p.name + part);
        continue;
      }
      nf4::Quantized q = bnb->read(p.name, p.shape);
      if (!nf4) {  // a LoRA run over a 4-bit folder: its weights dequantised
        const TensorSpec& t = layout[p.tensor];
        nf4::dequantize(q, b.dense[static_cast<size_t>(p.tensor)].data() +
                               static_cast<size_t>(p.layer) * t.rows * t.cols + p.row0 * p.cols);
        continue;
      }
      b.module(p.layer, module_of(d, p)) = std::move(q);
      continue;
    }
    if (bnb) bnb->refuse_without_state(p.name);  // packed, but without the state saying how
    if (!nf4 || !is_projection_tensor(p.tensor)) {
      const TensorSpec& t = layout[p.tensor];
      float* dst = b.dense[static_cast<size_t>(p.tensor)].data() +
                   (p.layer >= 0 ? static_cast<size_t>(p.layer) * t.rows * t.cols : 0) + p.row0 * p.cols;
      ck.read_f32(p.name, dst, p.shape);
      check_finite(folder, p, dst);
      continue;
    }
    if (!b.holds_layer(p.layer)) {  // another pipeline stage's
      ck.mark_read(p.name);
      continue;
    }
    module.resize(p.rows * p.cols);
    ck.read_f32(p.name, module.data(), p.shape);
    check_finite(folder, p, module.data());
    b.module(p.layer, module_of(d, p)) =
        nf4::quantize(module.data(), static_cast<int64_t>(module.size()), p.shape, double_quant);
  }
  refuse_unread(folder, d, ck);
  return b;
}

HfConfig hf_config_for(const ModelDims& d, const HfConfig* source) {
  HfConfig c;
  if (source != nullptr) c = *source;
  if (c.model_type.empty()) c.model_type = d.qk_norm ? "qwen3" : (d.qkv_bias ? "qwen2" : "llama");
  c.architecture = hf_architecture(c.model_type);
  c.vocab_size = d.vocab_size;
  c.hidden_size = d.n_embd;
  c.intermediate_size = d.ffn();
  c.num_hidden_layers = d.n_layer;
  c.num_attention_heads = d.n_head;
  c.num_key_value_heads = d.kv_heads();
  c.head_dim = d.hd();
  c.hidden_act = "silu";
  // The float the engine uses, written as its shortest decimal (1e-06, not 9.99999997e-07), or
  // the source's own value when that is the same float.
  if (source != nullptr && static_cast<float>(source->rms_norm_eps) == d.norm_eps) {
    c.rms_norm_eps = source->rms_norm_eps;
  } else {
    for (int digits = 1; digits <= 9; ++digits) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.*g", digits, static_cast<double>(d.norm_eps));
      c.rms_norm_eps = std::strtod(buf, nullptr);
      if (static_cast<float>(c.rms_norm_eps) == d.norm_eps) break;
    }
  }
  c.rope.type = d.rope.type;
  c.rope.theta = d.rope_theta;
  c.rope.factor = d.rope.factor;
  c.rope.low_freq_factor = d.rope.low_freq_factor;
  c.rope.high_freq_factor = d.rope.high_freq_factor;
  c.rope.original_max_position_embeddings = d.rope.type == "llama3" ? d.rope.original_max_position : 0;
  if (c.max_position_embeddings <= 0) c.max_position_embeddings = d.max_seq_len;
  c.tie_word_embeddings = d.tied_embeddings;
  c.qkv_bias = d.qkv_bias;
  c.o_bias = false;
  c.qk_norm = d.qk_norm;
  return c;
}

std::vector<std::string> export_hf_folder(const std::string& dir, const ModelDims& d, const float* full,
                                          const HfExportOptions& options) {
  if (!d.llama())
    throw_usage("export --format hf writes Llama-family models; for GPT-2 use --format safetensors");
  HfConfig source;
  // A Hub name as the source: its snapshot's config.json and tokenizer files.
  const std::string source_folder = local_model_folder(options.source_folder, "model.init_from");
  const bool have_source = is_hf_folder(source_folder);
  if (have_source) source = read_hf_config(source_folder);
  const HfConfig c = hf_config_for(d, have_source ? &source : nullptr);
  const ParamLayout layout(d);
  std::vector<HfOutTensor> tensors;
  for (const Piece& p : pieces(d)) {
    const float* src = full + piece_offset(layout, p);
    const size_t count = p.rows * p.cols;
    tensors.push_back(
        {p.name, p.shape, [src, count](float* dst) { std::memcpy(dst, src, count * sizeof(float)); }});
  }
  HfWriteOptions w;
  w.dtype = options.dtype;
  w.text_files["config.json"] = hf_config_json(c, options.dtype);
  w.text_files["generation_config.json"] = hf_generation_config_json(c);
  if (!options.tokenizer_folder.empty())
    w.tokenizer_dir = local_model_folder(options.tokenizer_folder, "--tokenizer", hub::FileSet::kTokenizer);
  else if (have_source)
    w.tokenizer_dir = source_folder;
  return write_hf_checkpoint(dir, tensors, w).files;
}

}  // namespace flotilla::interop
