// The presets: tiny/small for CPU demos and tests, the four released GPT-2 sizes, and the shapes
// of released Llama-family models (their config.json values: SmolLM2-135M, Qwen2.5-0.5B,
// Qwen3-0.6B, Llama-3.2-1B, and the 7-8B models people LoRA-tune on one to four GPUs:
// Llama-3.1-8B, Qwen2.5-7B, Qwen3-8B), so a run can start from scratch at a real model's size, be
// planned before its weights are downloaded, or match a Hugging Face folder read with
// model.init_from.
#include "engine/config/presets.h"

namespace flotilla {
namespace {

ModelSection gpt2(int layers, int heads, int width) {
  ModelSection m;
  m.arch = "gpt2";
  m.n_layer = layers;
  m.n_head = heads;
  m.n_embd = width;
  return m;
}

struct LlamaShape {
  int layers, heads, kv_heads, head_dim, width, ffn, vocab, max_seq;
  double theta, eps;
  bool tied, qkv_bias, qk_norm;
};

ModelSection llama(const LlamaShape& s) {
  ModelSection m;
  m.arch = "llama";
  m.n_layer = s.layers;
  m.n_head = s.heads;
  m.n_kv_head = s.kv_heads;
  m.head_dim = s.head_dim;
  m.n_embd = s.width;
  m.ffn_dim = s.ffn;
  m.vocab_size = s.vocab;
  m.max_seq_len = s.max_seq;
  m.rope_theta = s.theta;
  m.norm_eps = s.eps;
  m.tie_embeddings = s.tied;
  m.qkv_bias = s.qkv_bias;
  m.qk_norm = s.qk_norm;
  return m;
}

ModelSection llama32_1b() {
  ModelSection m = llama({16, 32, 8, 64, 2048, 8192, 128256, 131072, 500000.0, 1e-5, true, false, false});
  m.rope_scaling = "llama3";
  m.rope_factor = 32.0;
  m.rope_low_freq_factor = 1.0;
  m.rope_high_freq_factor = 4.0;
  m.rope_original_max_position = 8192;
  return m;
}

// meta-llama/Llama-3.1-8B config.json: 32 layers, 32 heads, 8 KV heads, hidden 4096 (head_dim
// 4096 / 32 = 128), intermediate 14336, vocab 128256, max_position_embeddings 131072, rope_theta
// 500000, rope_scaling llama3 (factor 8, low_freq_factor 1, high_freq_factor 4,
// original_max_position_embeddings 8192), rms_norm_eps 1e-5, tie_word_embeddings false.
ModelSection llama31_8b() {
  ModelSection m = llama({32, 32, 8, 128, 4096, 14336, 128256, 131072, 500000.0, 1e-5, false, false, false});
  m.rope_scaling = "llama3";
  m.rope_factor = 8.0;
  m.rope_low_freq_factor = 1.0;
  m.rope_high_freq_factor = 4.0;
  m.rope_original_max_position = 8192;
  return m;
}

// Qwen/Qwen2.5-7B config.json (model_type qwen2: q/k/v biases): 28 layers, 28 heads, 4 KV heads,
// hidden 3584 (head_dim 128), intermediate 18944, vocab 152064, max_position_embeddings 131072,
// rope_theta 1e6, rms_norm_eps 1e-6, tie_word_embeddings false.
ModelSection qwen25_7b() {
  return llama({28, 28, 4, 128, 3584, 18944, 152064, 131072, 1000000.0, 1e-6, false, true, false});
}

// Qwen/Qwen3-8B config.json (model_type qwen3: q/k RMSNorm, no biases): 36 layers, 32 heads, 8 KV
// heads, head_dim 128, hidden 4096, intermediate 12288, vocab 151936, max_position_embeddings
// 40960, rope_theta 1e6, rms_norm_eps 1e-6, tie_word_embeddings false.
ModelSection qwen3_8b() {
  return llama({36, 32, 8, 128, 4096, 12288, 151936, 40960, 1000000.0, 1e-6, false, false, true});
}

ModelSection llama_tiny() {  // the tiny preset's size in the llama architecture (vocab: the user's)
  ModelSection m = llama({4, 4, 2, 64, 256, 688, 50257, 1024, 10000.0, 1e-5, true, false, false});
  return m;
}

}  // namespace

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = {
      {"tiny", "GPT-2, 4 layers, width 256: demos and tests on a CPU", gpt2(4, 4, 256)},
      {"small", "GPT-2, 6 layers, width 384: quick CPU experiments", gpt2(6, 6, 384)},
      {"gpt2-124m", "GPT-2 small (124M)", gpt2(12, 12, 768)},
      {"gpt2-350m", "GPT-2 medium (350M)", gpt2(24, 16, 1024)},
      {"gpt2-774m", "GPT-2 large (774M)", gpt2(36, 20, 1280)},
      {"gpt2-1.5b", "GPT-2 XL (1.5B)", gpt2(48, 25, 1600)},
      {"llama-tiny", "Llama architecture, 4 layers, width 256, 2 KV heads: demos and tests on a CPU",
       llama_tiny()},
      {"smollm2-135m", "SmolLM2-135M shape (Llama architecture, 30 layers, 3 KV heads, tied)",
       llama({30, 9, 3, 64, 576, 1536, 49152, 8192, 100000.0, 1e-5, true, false, false}), true},
      {"qwen2.5-0.5b", "Qwen2.5-0.5B shape (q/k/v biases, 2 KV heads, tied)",
       llama({24, 14, 2, 64, 896, 4864, 151936, 32768, 1000000.0, 1e-6, true, true, false}), true},
      {"qwen3-0.6b", "Qwen3-0.6B shape (q/k RMSNorm, head_dim 128, tied)",
       llama({28, 16, 8, 128, 1024, 3072, 151936, 40960, 1000000.0, 1e-6, true, false, true}), true},
      {"llama3.2-1b", "Llama-3.2-1B shape (llama3 RoPE scaling, 8 KV heads, tied)", llama32_1b(), true},
      {"llama3.1-8b", "Llama-3.1-8B shape (llama3 RoPE scaling, 8 KV heads, untied)", llama31_8b(), true},
      {"qwen2.5-7b", "Qwen2.5-7B shape (q/k/v biases, 4 KV heads, untied)", qwen25_7b(), true},
      {"qwen3-8b", "Qwen3-8B shape (q/k RMSNorm, 8 KV heads, untied)", qwen3_8b(), true},
  };
  return presets;
}

std::optional<ModelPreset> find_model_preset(const std::string& name) {
  for (const auto& p : model_presets())
    if (name == p.name) return p;
  return std::nullopt;
}

std::vector<std::string> preset_keys(const ModelPreset& preset) {
  std::vector<std::string> keys = {"model.arch", "model.n_layer", "model.n_head", "model.n_embd"};
  // Every preset sets the llama keys (a GPT-2 preset to their defaults), so switching presets
  // never leaves another architecture's values behind.
  for (const char* k :
       {"model.n_kv_head", "model.head_dim", "model.ffn_dim", "model.norm_eps", "model.tie_embeddings",
        "model.qkv_bias", "model.qk_norm", "model.rope_theta", "model.rope_scaling", "model.rope_factor",
        "model.rope_low_freq_factor", "model.rope_high_freq_factor", "model.rope_original_max_position"})
    keys.emplace_back(k);
  if (preset.sets_vocab) {
    keys.emplace_back("model.vocab_size");
    keys.emplace_back("model.max_seq_len");
  }
  return keys;
}

}  // namespace flotilla
