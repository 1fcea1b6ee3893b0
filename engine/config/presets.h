// Model presets: named shapes of the GPT-2 family and of released Llama-family models. A preset
// sets the shape keys it lists (see apply_preset in config_io.cpp); a key given explicitly in the
// config wins over the preset.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/config/run_config.h"

namespace flotilla {

struct ModelPreset {
  const char* name;
  const char* description;
  ModelSection shape;       // arch, dims and (llama) the architecture keys
  bool sets_vocab = false;  // also vocab_size and max_seq_len (a released model's tokenizer)
};

const std::vector<ModelPreset>& model_presets();
std::optional<ModelPreset> find_model_preset(const std::string& name);

// The model.* keys a preset sets: arch, n_layer, n_head, n_embd, every llama key (a GPT-2 preset
// resets them to their defaults), and vocab_size / max_seq_len when sets_vocab.
std::vector<std::string> preset_keys(const ModelPreset& preset);

}  // namespace flotilla
