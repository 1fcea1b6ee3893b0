// The GPT-2 family presets: tiny/small for CPU demos and tests, then the four released sizes.
#include "engine/config/presets.h"

namespace flotilla {

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = {
      {"tiny", 4, 4, 256, "4 layers, width 256: demos and tests on a CPU"},
      {"small", 6, 6, 384, "6 layers, width 384: quick CPU experiments"},
      {"gpt2-124m", 12, 12, 768, "GPT-2 small (124M)"},
      {"gpt2-350m", 24, 16, 1024, "GPT-2 medium (350M)"},
      {"gpt2-774m", 36, 20, 1280, "GPT-2 large (774M)"},
      {"gpt2-1.5b", 48, 25, 1600, "GPT-2 XL (1.5B)"},
  };
  return presets;
}

std::optional<ModelPreset> find_model_preset(const std::string& name) {
  for (const auto& p : model_presets())
    if (name == p.name) return p;
  return std::nullopt;
}

}  // namespace flotilla
