// config.json / generation_config.json writers for the Llama family (rules in hf_config.h).
//
// The classic layout (top-level rope_theta, rope_scaling with rope_type) is what transformers 4.4x
// reads and 5.x still converts into rope_parameters, so one file serves both. Keys whose meaning
// would change under a different engine are checked first: the file must describe exactly the model
// the weights belong to, for that model_type's transformers class.
#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/interop/hf_config.h"

namespace flotilla::interop {
namespace {

using json = nlohmann::json;

json token_ids_json(const HfTokenIds& t) {
  if (t.ids.empty()) return nullptr;
  if (t.list || t.ids.size() > 1) return t.ids;
  return t.ids[0];
}

std::string torch_dtype_name(const std::string& dtype) {
  if (dtype == "bf16" || dtype == "bfloat16") return "bfloat16";
  if (dtype == "fp32" || dtype == "float32") return "float32";
  if (dtype == "fp16" || dtype == "float16") return "float16";
  throw Error(ExitCode::kUsage, "config.json dtype \"" + dtype + "\" is not one of bf16, fp32, fp16");
}

// Throws Error(kConfig) when transformers' class for c.model_type cannot hold `c`.
void check_expressible(const HfConfig& c) {
  auto refuse = [&](const std::string& why) {
    throw Error(ExitCode::kConfig, "cannot write config.json for model_type " + c.model_type + ": " + why);
  };
  if (hf_architecture(c.model_type).empty())
    refuse("not a supported model_type (llama, qwen2, qwen3, mistral)");
  if (c.vocab_size <= 0 || c.hidden_size <= 0 || c.intermediate_size <= 0 || c.num_hidden_layers <= 0 ||
      c.num_attention_heads <= 0 || c.num_key_value_heads <= 0 || c.head_dim <= 0 ||
      c.max_position_embeddings <= 0 || c.num_attention_heads % c.num_key_value_heads != 0)
    refuse("sizes must be positive and num_key_value_heads must divide num_attention_heads");
  if (c.rope.type != "default" && c.rope.type != "linear" && c.rope.type != "llama3")
    refuse("RoPE type " + c.rope.type + " is not default, linear or llama3");
  const bool even_heads = c.hidden_size % c.num_attention_heads == 0;
  if (c.model_type == "llama") {
    if (c.qkv_bias != c.o_bias) refuse("attention_bias covers q/k/v and o_proj alike; they must agree");
    if (c.qk_norm) refuse("it has no q/k norms (use model_type qwen3)");
    if (!even_heads) refuse("transformers requires hidden_size to be a multiple of num_attention_heads");
  } else if (c.model_type == "qwen2") {
    if (!c.qkv_bias || c.o_bias) refuse("Qwen2 always has q/k/v biases and no o_proj bias");
    if (c.qk_norm) refuse("it has no q/k norms (use model_type qwen3)");
    if (!even_heads || c.head_dim != c.hidden_size / c.num_attention_heads)
      refuse(
          "transformers 4.x ignores head_dim for Qwen2; head_dim must be hidden_size / num_attention_heads");
  } else if (c.model_type == "qwen3") {
    if (c.qkv_bias != c.o_bias) refuse("attention_bias covers q/k/v and o_proj alike; they must agree");
    if (!c.qk_norm) refuse("Qwen3 always has q/k norms");
  } else {  // mistral
    if (c.qkv_bias || c.o_bias) refuse("Mistral has no attention biases");
    if (c.rope.type != "default")
      refuse("transformers 4.4x ignores RoPE scaling for Mistral (use model_type llama)");
    if (c.qk_norm) refuse("it has no q/k norms (use model_type qwen3)");
  }
}

}  // namespace

std::string hf_config_json(const HfConfig& c, const std::string& dtype) {
  check_expressible(c);
  const std::string torch_dtype = torch_dtype_name(dtype);
  json j = json::parse(c.raw_json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) j = json::object();
  // Keys this writer owns or that must not carry over (5.x-only RoPE layout, derived layer types,
  // settings for weights we do not write, custom-code pointers).
  for (const char* k :
       {"rope_parameters", "rope_scaling", "rope_theta", "partial_rotary_factor", "layer_types",
        "quantization_config", "auto_map", "torch_dtype", "dtype", "attention_bias", "mlp_bias"})
    j.erase(k);

  j["architectures"] = {c.architecture.empty() ? hf_architecture(c.model_type) : c.architecture};
  j["model_type"] = c.model_type;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["initializer_range"] = c.initializer_range;
  j["rope_theta"] = c.rope.theta;
  if (c.rope.type == "default") {
    j["rope_scaling"] = nullptr;
  } else {
    json s = {{"rope_type", c.rope.type}, {"factor", c.rope.factor}};
    if (c.rope.type == "llama3") {
      s["low_freq_factor"] = c.rope.low_freq_factor;
      s["high_freq_factor"] = c.rope.high_freq_factor;
      s["original_max_position_embeddings"] = c.rope.original_max_position_embeddings;
    }
    j["rope_scaling"] = s;
  }
  if (c.model_type == "llama") {
    j["attention_bias"] = c.qkv_bias;
    j["mlp_bias"] = false;
  } else if (c.model_type == "qwen3") {
    j["attention_bias"] = c.qkv_bias;
  }
  if (c.model_type == "mistral" && !j.contains("sliding_window")) j["sliding_window"] = nullptr;  // else 4096
  j["bos_token_id"] = token_ids_json(c.bos_token_id);
  j["eos_token_id"] = token_ids_json(c.eos_token_id);
  if (c.pad_token_id)
    j["pad_token_id"] = *c.pad_token_id;
  else
    j["pad_token_id"] = nullptr;
  j["torch_dtype"] = torch_dtype;  // transformers 4.x
  j["dtype"] = torch_dtype;        // transformers 5.x
  return j.dump(2) + "\n";
}

std::string hf_generation_config_json(const HfConfig& c) {
  json j = json::object();
  j["_from_model_config"] = true;
  j["bos_token_id"] = token_ids_json(c.bos_token_id);
  j["eos_token_id"] = token_ids_json(c.eos_token_id);
  if (c.pad_token_id) j["pad_token_id"] = *c.pad_token_id;
  return j.dump(2) + "\n";
}

}  // namespace flotilla::interop
