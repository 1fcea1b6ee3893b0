// ModelDims from the config, and the consistency rules every architecture's sizes obey.
#include "engine/model/model_dims.h"

#include "engine/config/run_config.h"
#include "engine/core/error.h"

namespace flotilla {

const char* arch_name(Arch a) { return a == Arch::kLlama ? "llama" : "gpt2"; }

Arch parse_arch(const std::string& name) {
  if (name == "gpt2") return Arch::kGpt2;
  if (name == "llama") return Arch::kLlama;
  throw_config("model.arch = \"" + name + "\" is not a known architecture; use \"gpt2\" or \"llama\"");
}

int pad_vocab(int vocab_size) { return (vocab_size + 127) / 128 * 128; }

ModelDims dims_from_config(const ModelSection& m) {
  ModelDims d;
  d.arch = parse_arch(m.arch);
  d.n_layer = m.n_layer;
  d.n_head = m.n_head;
  d.n_embd = m.n_embd;
  d.vocab_size = m.vocab_size;
  d.padded_vocab = pad_vocab(m.vocab_size);
  d.max_seq_len = m.max_seq_len;
  if (d.llama()) {
    d.n_kv_head = m.n_kv_head;
    d.head_dim = m.head_dim;
    d.ffn_dim = m.ffn_dim;
    d.norm_eps = static_cast<float>(m.norm_eps);
    d.tied_embeddings = m.tie_embeddings;
    d.qkv_bias = m.qkv_bias;
    d.qk_norm = m.qk_norm;
    d.rope_theta = m.rope_theta;
    d.rope.type = m.rope_scaling;
    d.rope.factor = m.rope_factor;
    d.rope.low_freq_factor = m.rope_low_freq_factor;
    d.rope.high_freq_factor = m.rope_high_freq_factor;
    d.rope.original_max_position = m.rope_original_max_position;
  }
  return d;
}

std::string describe_dims(const ModelDims& d) {
  std::string s = std::string(arch_name(d.arch)) + " " + std::to_string(d.n_layer) + " layers, " +
                  std::to_string(d.n_head) + " heads";
  if (d.llama()) s += " (" + std::to_string(d.kv_heads()) + " KV, head_dim " + std::to_string(d.hd()) + ")";
  s += ", C " + std::to_string(d.n_embd);
  if (d.llama()) s += ", F " + std::to_string(d.ffn());
  return s;
}

std::string dims_problem(const ModelDims& d) {
  auto n = [](int v) { return std::to_string(v); };
  if (d.n_layer < 1 || d.n_head < 1 || d.n_embd < 1 || d.vocab_size < 1 || d.max_seq_len < 1)
    return "model.n_layer, n_head, n_embd, vocab_size and max_seq_len must all be positive (n_layer " +
           n(d.n_layer) + ", n_head " + n(d.n_head) + ", n_embd " + n(d.n_embd) + ", vocab_size " +
           n(d.vocab_size) + ", max_seq_len " + n(d.max_seq_len) + ")";
  if (d.padded_vocab < d.vocab_size) return "padded vocabulary smaller than model.vocab_size";
  if (!d.llama()) {
    if (d.n_embd % d.n_head != 0)
      return "model.n_head = " + n(d.n_head) + " must divide model.n_embd = " + n(d.n_embd);
    return "";
  }
  if (d.n_kv_head < 0 || d.head_dim < 0 || d.ffn_dim < 0)
    return "model.n_kv_head, head_dim and ffn_dim must be >= 0 (0 = derived)";
  if (d.head_dim == 0 && d.n_embd % d.n_head != 0)
    return "model.n_head = " + n(d.n_head) + " must divide model.n_embd = " + n(d.n_embd) +
           " unless model.head_dim is set";
  if (d.n_head % d.kv_heads() != 0)
    return "model.n_kv_head = " + n(d.kv_heads()) + " must divide model.n_head = " + n(d.n_head) +
           " (grouped-query attention shares each K/V head among n_head / n_kv_head query heads)";
  if (d.hd() % 2 != 0) return "model.head_dim = " + n(d.hd()) + " must be even (RoPE rotates pairs)";
  if (!(d.norm_eps > 0.0f)) return "model.norm_eps must be positive";
  if (!(d.rope_theta > 1.0)) return "model.rope_theta must be greater than 1";
  if (d.rope.type != "default" && d.rope.type != "linear" && d.rope.type != "llama3")
    return "model.rope_scaling = \"" + d.rope.type + "\": use \"default\", \"linear\" or \"llama3\"";
  if (d.rope.type != "default" && !(d.rope.factor >= 1.0))
    return "model.rope_factor must be >= 1 with rope_scaling = \"" + d.rope.type + "\"";
  if (d.rope.type == "llama3" &&
      (!(d.rope.high_freq_factor > d.rope.low_freq_factor) || d.rope.original_max_position < 1))
    return "llama3 RoPE scaling needs model.rope_high_freq_factor > rope_low_freq_factor and "
           "rope_original_max_position >= 1";
  return "";
}

}  // namespace flotilla
