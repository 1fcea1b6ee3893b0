// Model presets (GPT-2 family). A preset sets n_layer, n_head, n_embd; any field can be overridden.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace flotilla {

struct ModelPreset {
  const char* name;
  int n_layer;
  int n_head;
  int n_embd;
  const char* description;
};

const std::vector<ModelPreset>& model_presets();
std::optional<ModelPreset> find_model_preset(const std::string& name);

}  // namespace flotilla
