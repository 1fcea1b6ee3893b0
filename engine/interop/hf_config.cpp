// config.json reader for the Llama family: per-model_type defaults, both RoPE layouts, refusals with
// the key named (rules in hf_config.h; writing is in hf_config_write.cpp).
#include "engine/interop/hf_config.h"

#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/core/error.h"
#include "engine/interop/model_source.h"

namespace flotilla::interop {
namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxConfigBytes = uint64_t{16} << 20;
constexpr int64_t kMaxSize = std::numeric_limits<int32_t>::max();

// What transformers' config class of each model_type assumes for keys a config.json leaves out.
struct TypeDefaults {
  const char* model_type;
  const char* architecture;
  std::optional<int64_t> kv_heads;  // nullopt: = num_attention_heads
  std::optional<int64_t> head_dim;  // nullopt: hidden_size / num_attention_heads
  int64_t max_position_embeddings;
  std::optional<int64_t> bos, eos;
};
const TypeDefaults kTypes[] = {
    {"llama", "LlamaForCausalLM", std::nullopt, std::nullopt, 2048, 1, 2},
    {"qwen2", "Qwen2ForCausalLM", 32, std::nullopt, 32768, std::nullopt, std::nullopt},
    {"qwen3", "Qwen3ForCausalLM", 32, 128, 32768, std::nullopt, std::nullopt},
    {"mistral", "MistralForCausalLM", 8, std::nullopt, 4096 * 32, 1, 2},
};
constexpr int64_t kDefaultSlidingWindow = 4096;  // Qwen2/Qwen3/Mistral config classes
constexpr int64_t kDefaultMaxWindowLayers = 28;  // Qwen2/Qwen3

const TypeDefaults* type_defaults(const std::string& model_type) {
  for (const TypeDefaults& t : kTypes)
    if (model_type == t.model_type) return &t;
  return nullptr;
}

std::string show(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// Typed access to one JSON object; each failure is recorded as a problem naming `prefix + key`.
class Fields {
 public:
  Fields(const json& obj, std::string prefix, std::vector<std::string>* problems)
      : obj_(obj), prefix_(std::move(prefix)), problems_(problems) {}

  // The value, or null when the key is absent or JSON null (transformers treats both as "unset").
  const json* find(const char* key) const {
    const auto it = obj_.find(key);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }
  bool has(const char* key) const { return find(key) != nullptr; }
  void problem(const std::string& text) const { problems_->push_back(text); }
  std::string name(const char* key) const { return prefix_ + key; }

  // A positive integer below 2^31; `def` when unset, else a "missing" problem.
  int64_t size(const char* key, std::optional<int64_t> def) const {
    const json* v = find(key);
    if (v == nullptr) {
      if (!def) problem(name(key) + " is missing; a Llama-family config.json states it");
      return def.value_or(0);
    }
    if (!v->is_number_integer()) {
      problem(name(key) + " = " + show(*v) + " is not an integer");
      return 0;
    }
    const bool in_range = v->is_number_unsigned() ? v->get<uint64_t>() > 0 &&
                                                        v->get<uint64_t>() <= static_cast<uint64_t>(kMaxSize)
                                                  : v->get<int64_t>() > 0 && v->get<int64_t>() <= kMaxSize;
    if (!in_range) {
      problem(name(key) + " = " + show(*v) + " must be a positive integer below 2^31");
      return 0;
    }
    return v->get<int64_t>();
  }

  // A finite number; positive unless allow_zero; `def` when unset.
  double number(const char* key, std::optional<double> def, bool allow_zero = false) const {
    const json* v = find(key);
    if (v == nullptr) {
      if (!def) problem(name(key) + " is missing");
      return def.value_or(0.0);
    }
    const double d = v->is_number() ? v->get<double>() : std::nan("");
    if (!v->is_number() || !std::isfinite(d) || d < 0.0 || (d == 0.0 && !allow_zero)) {
      problem(name(key) + " = " + show(*v) + " must be a " + (allow_zero ? "non-negative" : "positive") +
              " number");
      return def.value_or(0.0);
    }
    return d;
  }

  bool boolean(const char* key, bool def) const {
    const json* v = find(key);
    if (v == nullptr) return def;
    if (!v->is_boolean()) {
      problem(name(key) + " = " + show(*v) + " must be true or false");
      return def;
    }
    return v->get<bool>();
  }

  std::string string(const char* key, const std::string& def) const {
    const json* v = find(key);
    if (v == nullptr) return def;
    if (!v->is_string()) {
      problem(name(key) + " = " + show(*v) + " must be a string");
      return def;
    }
    return v->get<std::string>();
  }

  HfTokenIds token_ids(const char* key, std::optional<int64_t> def, bool allow_list) const {
    HfTokenIds out;
    const auto it = obj_.find(key);
    if (it == obj_.end()) {
      if (def) out.ids.push_back(*def);
      return out;
    }
    const json& v = *it;
    if (v.is_null()) return out;
    if (v.is_number_integer()) {
      out.ids.push_back(v.get<int64_t>());
      return out;
    }
    if (allow_list && v.is_array()) {
      out.list = true;
      for (const json& e : v) {
        if (!e.is_number_integer()) {
          problem(name(key) + " = " + show(v) + " must hold integer token ids");
          return {};
        }
        out.ids.push_back(e.get<int64_t>());
      }
      return out;
    }
    problem(name(key) + " = " + show(v) + " must be an integer token id" +
            (allow_list ? " or a list of them" : ""));
    return {};
  }

  const json& obj() const { return obj_; }
  // The same checks on a nested object, its keys named `prefix`.
  Fields nested(const json& obj, const std::string& prefix) const { return Fields(obj, prefix, problems_); }

 private:
  const json& obj_;
  std::string prefix_;
  std::vector<std::string>* problems_;
};

// The RoPE type and its factors from a rope_scaling / rope_parameters object (theta handled by the caller).
HfRope parse_rope_object(const Fields& f, const std::string& where) {
  HfRope r;
  for (const char* layer_type : {"full_attention", "sliding_attention"})
    if (f.find(layer_type) != nullptr && f.find(layer_type)->is_object()) {
      f.problem(where + " is given per layer type (" + layer_type +
                "); only one RoPE for all layers is supported (a model with mixed attention types)");
      return r;
    }
  const std::string rope_type = f.string("rope_type", ""), legacy = f.string("type", "");
  if (!rope_type.empty() && !legacy.empty() && rope_type != legacy)
    f.problem(where + ".rope_type \"" + rope_type + "\" and " + where + ".type \"" + legacy +
              "\" disagree; keep one");
  r.type = !rope_type.empty() ? rope_type : (!legacy.empty() ? legacy : "default");
  const std::string key = f.has("rope_type") ? ".rope_type" : ".type";
  if (r.type == "linear") {
    r.factor = f.number("factor", std::nullopt);
  } else if (r.type == "llama3") {
    r.factor = f.number("factor", std::nullopt);
    r.low_freq_factor = f.number("low_freq_factor", std::nullopt);
    r.high_freq_factor = f.number("high_freq_factor", std::nullopt);
    r.original_max_position_embeddings = f.size("original_max_position_embeddings", std::nullopt);
    if (r.low_freq_factor > 0 && r.high_freq_factor > 0 && r.high_freq_factor <= r.low_freq_factor)
      f.problem(where + ".high_freq_factor " + num(r.high_freq_factor) + " must exceed " + where +
                ".low_freq_factor " + num(r.low_freq_factor));
  } else if (r.type != "default") {
    f.problem(where + key + " = \"" + r.type +
              "\" is not supported: the engine implements the RoPE types default, linear and llama3 only "
              "(not yarn, dynamic, longrope, ...); choose a model without it");
  }
  if (const json* p = f.find("partial_rotary_factor");
      p != nullptr && !(p->is_number() && p->get<double>() == 1.0))
    f.problem(where + ".partial_rotary_factor = " + show(*p) +
              " is not supported: the engine rotates the whole head (1.0)");
  return r;
}

bool same_scaling(const HfRope& a, const HfRope& b) {
  if (a.type != b.type) return false;
  if (a.type == "default") return true;
  if (a.factor != b.factor) return false;
  return a.type != "llama3" ||
         (a.low_freq_factor == b.low_freq_factor && a.high_freq_factor == b.high_freq_factor &&
          a.original_max_position_embeddings == b.original_max_position_embeddings);
}

std::string scaling_text(const HfRope& r) {
  std::string s = r.type;
  if (r.type != "default") s += " factor " + num(r.factor);
  if (r.type == "llama3")
    s += ", low_freq_factor " + num(r.low_freq_factor) + ", high_freq_factor " + num(r.high_freq_factor) +
         ", original_max_position_embeddings " + std::to_string(r.original_max_position_embeddings);
  return s;
}

void read_rope(const Fields& f, HfConfig* c) {
  const json* classic_theta = f.find("rope_theta");
  const auto scaling_it = f.obj().find("rope_scaling");
  const bool classic_scaling = scaling_it != f.obj().end();
  const json* v5 = f.find("rope_parameters");

  HfRope classic;
  if (classic_scaling && !scaling_it->is_null()) {
    if (!scaling_it->is_object())
      f.problem("rope_scaling = " + show(*scaling_it) + " must be an object or null");
    else
      classic = parse_rope_object(f.nested(*scaling_it, "rope_scaling."), "rope_scaling");
  }
  const double top_theta = f.number("rope_theta", 10000.0);
  if (v5 == nullptr) {
    c->rope = classic;
    c->rope.theta = top_theta;
    return;
  }
  if (!v5->is_object()) {
    f.problem("rope_parameters = " + show(*v5) + " must be an object");
    return;
  }
  const Fields pf = f.nested(*v5, "rope_parameters.");
  c->rope = parse_rope_object(pf, "rope_parameters");
  c->rope.theta = pf.has("rope_theta") ? pf.number("rope_theta", std::nullopt) : top_theta;
  if (classic_theta != nullptr && pf.has("rope_theta") && c->rope.theta != top_theta)
    f.problem("rope_theta " + num(top_theta) + " and rope_parameters.rope_theta " + num(c->rope.theta) +
              " disagree; keep one of the two layouts");
  if (classic_scaling && !same_scaling(classic, c->rope))
    f.problem("rope_scaling (" + scaling_text(classic) + ") and rope_parameters (" + scaling_text(c->rope) +
              ") disagree; keep one of the two layouts");
}

// Sliding-window attention matters when some layer uses a window shorter than the longest sequence.
void check_sliding_window(const Fields& f, const HfConfig& c) {
  const std::string advice =
      ": the engine has no sliding-window attention; use a model without it, or, if you train at sequence "
      "lengths within the window (where attention is identical), set sliding_window to null in config.json";
  if (c.model_type == "mistral") {
    const auto it = f.obj().find("sliding_window");
    if (it != f.obj().end() && it->is_null()) return;
    const int64_t w = f.size("sliding_window", kDefaultSlidingWindow);
    if (w > 0 && w < c.max_position_embeddings)
      f.problem(std::string(it == f.obj().end() ? "sliding_window (absent: transformers' default 4096)"
                                                : "sliding_window " + std::to_string(w)) +
                " is smaller than max_position_embeddings " + std::to_string(c.max_position_embeddings) +
                advice);
    return;
  }
  if (c.model_type != "qwen2" && c.model_type != "qwen3") return;
  const bool use = f.boolean("use_sliding_window", false);
  const auto it = f.obj().find("sliding_window");
  const bool window_null = it != f.obj().end() && it->is_null();
  const int64_t w = window_null ? 0 : f.size("sliding_window", kDefaultSlidingWindow);
  const int64_t max_window_layers = f.size("max_window_layers", kDefaultMaxWindowLayers);
  bool sliding_layer = false;
  if (const json* lt = f.find("layer_types"); lt != nullptr) {
    if (!lt->is_array()) {
      f.problem("layer_types = " + show(*lt) + " must be a list");
      return;
    }
    for (const json& t : *lt) {
      if (!t.is_string() || (t != "full_attention" && t != "sliding_attention")) {
        f.problem("layer_types holds " + show(t) + "; only full_attention (and sliding_attention) are known");
        return;
      }
      sliding_layer |= t == "sliding_attention";
    }
  } else {
    sliding_layer = max_window_layers < c.num_hidden_layers;
  }
  if (use && !window_null && sliding_layer && w > 0 && w < c.max_position_embeddings)
    f.problem("use_sliding_window: true with sliding_window " + std::to_string(w) +
              " < max_position_embeddings " + std::to_string(c.max_position_embeddings) + advice +
              " or use_sliding_window to false");
}

}  // namespace

std::string hf_architecture(const std::string& model_type) {
  const TypeDefaults* t = type_defaults(model_type);
  return t != nullptr ? t->architecture : "";
}

HfConfig parse_hf_config(const std::string& text, const std::string& label) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    throw_data(label + ": not a JSON object; a Hugging Face model folder's config.json is a JSON object");
  std::vector<std::string> problems;
  const Fields f(j, "", &problems);
  auto fail = [&]() {
    if (problems.empty()) return;
    std::string msg = label + ": ";
    if (problems.size() > 1) msg += std::to_string(problems.size()) + " problems: ";
    for (size_t i = 0; i < problems.size(); ++i) msg += (i ? "; " : "") + problems[i];
    throw_data(msg);
  };

  HfConfig c;
  c.raw_json = text;
  c.model_type = f.string("model_type", "");
  const TypeDefaults* t = type_defaults(c.model_type);
  if (t == nullptr) {
    f.problem(c.model_type.empty() ? std::string("model_type is missing; it names the architecture")
                                   : "model_type \"" + c.model_type + "\" is not supported");
    problems.back() += ": Flotilla trains the Llama family (model_type llama, qwen2, qwen3, mistral)";
    fail();
  }
  if (const json* a = f.find("architectures"); a == nullptr) {
    c.architecture = t->architecture;
  } else if (!a->is_array() || a->empty() || !(*a)[0].is_string()) {
    f.problem("architectures = " + show(*a) + " must be a list of class names such as [\"" + t->architecture +
              "\"]");
  } else {
    c.architecture = (*a)[0].get<std::string>();
    if (c.architecture != t->architecture)
      f.problem("architectures[0] = \"" + c.architecture + "\" is not supported: for model_type " +
                c.model_type + " only " + t->architecture + " (the causal language model) can be trained");
  }
  // A bitsandbytes 4-bit folder is QLoRA's base (interop/bnb.h reads and checks the rest of its
  // config and refuses what it cannot hold bit for bit); any other quantisation cannot be trained.
  if (const json* q = f.find("quantization_config"); q != nullptr) {
    c.bnb_4bit = q->is_object() && q->value("quant_method", std::string()) == "bitsandbytes" &&
                 q->value("load_in_4bit", false);
    if (!c.bnb_4bit)
      f.problem(
          "quantization_config is set: quantized checkpoints cannot be trained; use the unquantized model (a "
          "bitsandbytes 4-bit folder trains as QLoRA's base: lora.base_quant = \"nf4\")");
  }

  c.vocab_size = f.size("vocab_size", std::nullopt);
  c.hidden_size = f.size("hidden_size", std::nullopt);
  c.intermediate_size = f.size("intermediate_size", std::nullopt);
  c.num_hidden_layers = f.size("num_hidden_layers", std::nullopt);
  c.num_attention_heads = f.size("num_attention_heads", std::nullopt);
  c.num_key_value_heads = f.size("num_key_value_heads", t->kv_heads.value_or(c.num_attention_heads));
  const int64_t C = c.hidden_size, H = c.num_attention_heads, KV = c.num_key_value_heads;
  if (H > 0 && KV > 0 && (KV > H || H % KV != 0))
    f.problem("num_key_value_heads " + std::to_string(KV) + " does not divide num_attention_heads " +
              std::to_string(H) + " (grouped-query attention needs whole groups)");
  if (f.has("head_dim") || t->head_dim) {
    c.head_dim = f.size("head_dim", t->head_dim);
  } else if (C > 0 && H > 0) {
    c.head_dim = C / H;
    if (C % H != 0)
      f.problem("head_dim is not given and hidden_size " + std::to_string(C) +
                " is not a multiple of num_attention_heads " + std::to_string(H) + "; state head_dim");
  }
  if (c.head_dim % 2 != 0)
    f.problem("head_dim " + std::to_string(c.head_dim) + " is odd; RoPE rotates pairs of dimensions");

  c.hidden_act = f.string("hidden_act", "silu");
  if (c.hidden_act != "silu" && c.hidden_act != "swish")
    f.problem("hidden_act \"" + c.hidden_act + "\" is not supported: the MLP is SwiGLU with silu");
  c.rms_norm_eps = f.number("rms_norm_eps", 1e-6);
  c.max_position_embeddings = f.size("max_position_embeddings", t->max_position_embeddings);
  read_rope(f, &c);
  if (c.model_type == "mistral" && c.rope.type != "default")  // MistralRotaryEmbedding of 4.4x has no scaling
    f.problem(
        "RoPE scaling (" + c.rope.type +
        ") on model_type mistral is not supported: transformers 4.4x ignores it for Mistral, so an export "
        "would not load the same everywhere; remove rope_scaling or use model_type llama");
  if (const json* p = f.find("partial_rotary_factor");
      p != nullptr && !(p->is_number() && p->get<double>() == 1.0))
    f.problem("partial_rotary_factor = " + show(*p) +
              " is not supported: the engine rotates the whole head (1.0)");
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);

  if (c.model_type == "qwen2") {  // Qwen2Attention: q/k/v biases always, none on o_proj
    c.qkv_bias = true;
  } else if (c.model_type == "llama" || c.model_type == "qwen3") {
    c.qkv_bias = c.o_bias = f.boolean("attention_bias", false);
  }  // mistral: no biases (its attention ignores attention_bias)
  c.qk_norm = c.model_type == "qwen3";
  if (c.model_type == "llama" && f.boolean("mlp_bias", false))
    f.problem("mlp_bias: true is not supported: the engine's SwiGLU MLP has no biases");
  check_sliding_window(f, c);

  c.bos_token_id = f.token_ids("bos_token_id", t->bos, /*allow_list=*/true);
  c.eos_token_id = f.token_ids("eos_token_id", t->eos, /*allow_list=*/true);
  if (const HfTokenIds pad = f.token_ids("pad_token_id", std::nullopt, false); !pad.ids.empty())
    c.pad_token_id = pad.ids[0];
  c.dtype = f.find("dtype") != nullptr && f.find("dtype")->is_string() ? f.string("dtype", "")
                                                                       : f.string("torch_dtype", "");
  c.initializer_range = f.number("initializer_range", 0.02, /*allow_zero=*/true);
  fail();
  return c;
}

HfConfig read_hf_config(const std::string& folder_file_or_name) {
  const std::string folder_or_file =
      local_model_folder(folder_file_or_name, "model.init_from", hub::FileSet::kConfigOnly);
  struct stat st {};
  const bool dir = ::stat(folder_or_file.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  const std::string path = dir ? folder_or_file + "/config.json" : folder_or_file;
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw_data(
        path + ": cannot open" +
        (dir ? "; a Hugging Face model folder has config.json beside its safetensors" : std::string()));
  std::ostringstream ss;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    ss.write(buf, in.gcount());
    if (static_cast<uint64_t>(ss.tellp()) > kMaxConfigBytes)
      throw_data(path + ": larger than 16 MiB; not a model config.json");
  }
  return parse_hf_config(ss.str(), path);
}

}  // namespace flotilla::interop
