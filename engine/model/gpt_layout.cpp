// Parameter layout of the GPT-2 model: names, shapes, decay groups (shared by the model,
// checkpoints, the safetensors/llm.c converters and the planner).
#include <cassert>

#include "engine/model/gpt.h"

namespace flotilla {

int pad_vocab(int vocab_size) { return (vocab_size + 127) / 128 * 128; }

GptDims dims_from_config(const ModelSection& m) {
  GptDims d;
  d.n_layer = m.n_layer;
  d.n_head = m.n_head;
  d.n_embd = m.n_embd;
  d.vocab_size = m.vocab_size;
  d.padded_vocab = pad_vocab(m.vocab_size);
  d.max_seq_len = m.max_seq_len;
  return d;
}

const char* param_name(int index) {
  static const char* names[kNumParamTensors] = {"wte",      "wpe",      "ln1w", "ln1b", "qkvw", "qkvb",
                                                "attprojw", "attprojb", "ln2w", "ln2b", "fcw",  "fcb",
                                                "fcprojw",  "fcprojb",  "lnfw", "lnfb"};
  assert(index >= 0 && index < kNumParamTensors);
  return names[index];
}

bool is_layer_param(int index) { return index != kWte && index != kWpe && index != kLnfw && index != kLnfb; }

bool param_decays(int index) {
  switch (index) {
    case kWte:
    case kWpe:
    case kQkvw:
    case kAttprojw:
    case kFcw:
    case kFcprojw:
      return true;
    default:
      return false;
  }
}

std::array<size_t, kNumParamTensors> param_sizes(const GptDims& d) {
  const size_t Vp = static_cast<size_t>(d.padded_vocab), C = static_cast<size_t>(d.n_embd);
  const size_t L = static_cast<size_t>(d.n_layer), maxT = static_cast<size_t>(d.max_seq_len);
  return {Vp * C, maxT * C, L * C,         L * C,     L * 3 * C * C, L * 3 * C, L * C * C, L * C,
          L * C,  L * C,    L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C,     C,         C};
}

size_t num_parameters(const GptDims& d) {
  size_t n = 0;
  for (size_t s : param_sizes(d)) n += s;
  return n;
}

size_t num_parameters_unpadded(const GptDims& d) {
  return num_parameters(d) -
         static_cast<size_t>(d.padded_vocab - d.vocab_size) * static_cast<size_t>(d.n_embd);
}

}  // namespace flotilla
