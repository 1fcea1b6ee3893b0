// config.json of a Hugging Face Llama-family model (model_type llama, qwen2, qwen3, mistral): read,
// checked against what the engine implements, and written back for export.
//
// Decision: a key means what transformers makes of it for that model_type, defaults included (Qwen 3's
// head_dim defaults to 128, Mistral's sliding_window to 4096, Qwen 2 always has q/k/v biases and
// ignores attention_bias), so the model described here is the one from_pretrained would build. Both
// RoPE layouts are read: the classic top-level rope_theta + rope_scaling and transformers 5's
// rope_parameters (rope_theta inside); when both are present they must agree. Everything the engine
// cannot reproduce (other RoPE types, partial rotary, sliding windows, MLP biases, non-SiLU
// activations, quantized weights) is refused, every problem at once, each naming its key. Writing uses
// the classic keys, which transformers 4.4x reads and 5.x still accepts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace flotilla::interop {

// RoPE frequencies: inv_freq[i] = theta^(-2i/head_dim), then the type's rescaling.
struct HfRope {
  std::string type = "default";   // "default" | "linear" (positions / factor) | "llama3" (per band, below)
  double theta = 10000.0;         // rope_theta
  double factor = 1.0;            // linear, llama3
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 0;  // llama3
};

// A token id field that may be an int or a list of ints (eos_token_id in Llama 3.1 is a list).
struct HfTokenIds {
  std::vector<int64_t> ids;  // empty: absent or null
  bool list = false;         // written as a JSON list (else a single int)
};

struct HfConfig {
  std::string architecture;  // architectures[0]: "LlamaForCausalLM", "Qwen2ForCausalLM", ...
  std::string model_type;    // "llama" | "qwen2" | "qwen3" | "mistral"
  // config.json has a bitsandbytes 4-bit quantization_config: the folder loads only as QLoRA's
  // frozen base (interop::load_hf_base); never written back.
  bool bnb_4bit = false;
  int64_t vocab_size = 0;           // V: embedding rows (may exceed the tokenizer's size)
  int64_t hidden_size = 0;          // C
  int64_t intermediate_size = 0;    // F
  int64_t num_hidden_layers = 0;    // L
  int64_t num_attention_heads = 0;  // H
  int64_t num_key_value_heads = 0;  // KV, divides H
  int64_t head_dim = 0;             // d (even); may differ from C / H (Qwen 3)
  std::string hidden_act = "silu";  // "silu" (or its alias "swish")
  double rms_norm_eps = 1e-6;
  HfRope rope;
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;  // lm_head.weight absent; embed_tokens is the head
  // Attention biases: `.bias` tensors on q_proj, k_proj, v_proj and on o_proj. llama and qwen3 set both
  // from attention_bias; qwen2 always has q/k/v biases and no o_proj bias; mistral has none.
  bool qkv_bias = false;
  bool o_bias = false;
  bool qk_norm = false;  // per-head RMSNorm q_norm / k_norm ([d] weights) before RoPE: qwen3
  HfTokenIds bos_token_id, eos_token_id;
  std::optional<int64_t> pad_token_id;
  std::string dtype;  // "dtype" (transformers 5) or "torch_dtype" as written, e.g. "bfloat16"; may be empty
  double initializer_range = 0.02;
  std::string raw_json;  // the file's text: keys not modelled here are passed through on export
};

// Parses config.json text; `label` (the file name) prefixes errors. Throws Error(kData) listing every
// problem found, each with its key and what to do. Never crashes on malformed input.
HfConfig parse_hf_config(const std::string& json_text, const std::string& label);

// The causal-LM class transformers uses for a model_type ("LlamaForCausalLM" for "llama", ...); empty
// for an unsupported one.
std::string hf_architecture(const std::string& model_type);

// Reads FOLDER/config.json (or the file itself when given a file).
HfConfig read_hf_config(const std::string& folder_or_file);

// A config.json for `c` with torch_dtype / dtype = `dtype` ("bf16", "fp32", or a torch name such as
// "bfloat16"): the keys of `c` in the classic layout, over c.raw_json's other keys (minus
// rope_parameters, layer_types, quantization_config and auto_map). Throws Error(kConfig) when `c`
// cannot be expressed for its model_type (e.g. q/k norms on llama, an o_proj bias on qwen2).
std::string hf_config_json(const HfConfig& c, const std::string& dtype);

// generation_config.json: bos/eos/pad token ids as in `c`.
std::string hf_generation_config_json(const HfConfig& c);

}  // namespace flotilla::interop
