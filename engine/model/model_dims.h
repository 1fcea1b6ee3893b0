// The shape of a model: which architecture and its sizes (DESIGN.md §3; docs/config.md [model]).
//
// Two architectures share this struct. "gpt2": learned positions, LayerNorm with biases, a GELU
// MLP of width 4C, q/k/v biases, tied embeddings. "llama" (the Llama 3 / Qwen 2 / Qwen 3 / SmolLM2
// family): RMSNorm, a SwiGLU MLP of width ffn_dim, grouped-query attention with n_kv_head K/V heads
// and head_dim that may differ from n_embd / n_head, rotate-half RoPE, optional q/k/v biases
// (Qwen 2) and per-head q/k RMSNorm (Qwen 3), a tied or separate LM head.
// Non-obvious decision: the field names are GPT-2's (n_layer, n_head, n_embd) so every existing
// GPT-2 caller reads unchanged; the Llama-only fields carry 0 = "derive from the others" and are
// resolved by the accessors, never read raw.
#pragma once

#include <string>

namespace flotilla {

struct ModelSection;

enum class Arch { kGpt2, kLlama };

// RoPE frequencies (llama): inv_freq[i] = theta^(-2i/head_dim), then the scaling rule. "default"
// none; "linear" divides every frequency by factor; "llama3" (Llama 3.1/3.2) keeps high
// frequencies, divides low ones by factor and blends in between (docs/planner.md states the rule).
struct RopeScaling {
  std::string type = "default";  // default | linear | llama3
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position = 8192;
};

struct ModelDims {
  int n_layer = 4;
  int n_head = 4;
  int n_embd = 256;          // C
  int vocab_size = 50257;    // V: real vocabulary
  int padded_vocab = 50304;  // Vp: V rounded up to a multiple of 128 (extra rows never receive targets)
  int max_seq_len = 1024;    // maxT: rows of wpe (gpt2); longest sequence (llama)
  Arch arch = Arch::kGpt2;   // (after the GPT-2 sizes: positional initialisers of those stay valid)
  // llama only (0 = derived).
  int n_kv_head = 0;            // K/V heads; 0 = n_head
  int head_dim = 0;             // 0 = n_embd / n_head
  int ffn_dim = 0;              // MLP width; 0 = 4 * n_embd (gpt2)
  float norm_eps = 1e-5f;       // RMSNorm epsilon (gpt2's LayerNorm: always 1e-5)
  bool tied_embeddings = true;  // LM head = token embedding (gpt2: always)
  bool qkv_bias = false;        // biases on q, k, v (Qwen 2); gpt2 always has them
  bool qk_norm = false;         // per-head RMSNorm of q and k before RoPE (Qwen 3)
  double rope_theta = 10000.0;
  RopeScaling rope = {};

  bool llama() const { return arch == Arch::kLlama; }
  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int hd() const { return head_dim > 0 ? head_dim : n_embd / n_head; }
  int q_dim() const { return n_head * hd(); }       // query width (= C for gpt2)
  int kv_dim() const { return kv_heads() * hd(); }  // key (and value) width
  int qkv_dim() const { return q_dim() + 2 * kv_dim(); }
  int ffn() const { return ffn_dim > 0 ? ffn_dim : 4 * n_embd; }
  bool has_qkv_bias() const { return !llama() || qkv_bias; }
  bool tied() const { return !llama() || tied_embeddings; }
};

const char* arch_name(Arch a);  // "gpt2", "llama"
// Arch for model.arch; throws Error(kConfig) naming the key for anything else.
Arch parse_arch(const std::string& name);

ModelDims dims_from_config(const ModelSection& m);
int pad_vocab(int vocab_size);  // multiple of 128

// "gpt2 4 layers, 4 heads, C 256" / "llama 30 layers, 9 heads (3 KV, head_dim 64), C 576, F 1536".
std::string describe_dims(const ModelDims& d);

// Problems with the dimensions themselves (empty when consistent), each naming the model.* key:
// used by Model's constructor and validate().
std::string dims_problem(const ModelDims& d);

}  // namespace flotilla
