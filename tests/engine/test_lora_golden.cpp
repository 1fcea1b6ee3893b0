// LoRA on the CPU against PEFT: the three golden adapters (llama: r 4 on all seven projections;
// qwen2: r 2, rsLoRA, q and v; qwen3: r 4 on k, o, up, down) over the hf golden bases, imported from
// their PEFT folders; logits, loss, every adapter gradient, three AdamW steps and a frozen base
// (tests/tools/lora_golden.h). Also: the PEFT export equals the golden adapter tensor by tensor
// (names, shapes, bits) and imports back bitwise; the merged model (W + s B A) gives PEFT's
// merge_and_unload logits as a plain model, and its Hugging Face export reads back bitwise.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "check.h"
#include "engine/interop/safetensors.h"
#include "lora_golden.h"

using namespace flotilla;
namespace fs = std::filesystem;

namespace {

void export_matches_golden(const lora_golden::Golden& g) {
  const std::string out = std::string(FLOTILLA_TEST_TMP) + "/lora-golden-export-" + g.name;
  fs::remove_all(out);
  fs::create_directories(std::string(FLOTILLA_TEST_TMP));
  interop::PeftExportOptions o;
  o.base_model_name_or_path = g.base.dir;
  const auto files = interop::export_peft_adapter(out, g.base.dims, g.spec, g.adapters.data(), o);
  CHECK(files.size() == 2 && fs::exists(out + "/adapter_config.json") &&
        fs::exists(out + "/adapter_model.safetensors"));
  // Tensor by tensor: the same names, shapes and bits as PEFT's own file.
  const interop::SafetensorsFile mine(out + "/adapter_model.safetensors");
  const interop::SafetensorsFile theirs(g.adapter_dir + "/adapter_model.safetensors");
  CHECK_MSG(mine.entries().size() == theirs.entries().size(), "%s: %zu tensors exported, PEFT has %zu",
            g.name.c_str(), mine.entries().size(), theirs.entries().size());
  size_t equal = 0;
  for (const auto& e : theirs.entries()) {
    const interop::SafetensorsEntry* m = mine.find(e.name);
    CHECK_MSG(m != nullptr, "%s: the export has no %s", g.name.c_str(), e.name.c_str());
    if (m == nullptr) continue;
    CHECK(m->shape == e.shape && m->dtype == "F32");
    if (mine.read_f32(*m) == theirs.read_f32(e)) ++equal;
  }
  CHECK_MSG(equal == theirs.entries().size(), "%s: %zu of %zu tensors equal", g.name.c_str(), equal,
            theirs.entries().size());
  // The config: PEFT's keys with this adapter's values.
  std::ifstream in(out + "/adapter_config.json");
  std::stringstream text;
  text << in.rdbuf();
  const auto j = nlohmann::json::parse(text.str());
  std::ifstream gin(g.adapter_dir + "/adapter_config.json");
  std::stringstream gtext;
  gtext << gin.rdbuf();
  const auto gj = nlohmann::json::parse(gtext.str());
  for (const char* key : {"peft_type", "task_type", "r", "lora_alpha", "use_rslora", "bias", "target_modules",
                          "fan_in_fan_out", "use_dora"})
    CHECK_MSG(j.at(key) == gj.at(key), "%s: adapter_config.json \"%s\" differs from PEFT's", g.name.c_str(),
              key);
  for (auto it = gj.begin(); it != gj.end(); ++it)
    if (it.key() != "peft_version")
      CHECK_MSG(j.contains(it.key()), "%s: adapter_config.json lacks PEFT's key %s", g.name.c_str(),
                it.key().c_str());
  // It reads back as the same config and adapter.
  const interop::PeftAdapterConfig back = interop::read_peft_adapter_config(out);
  CHECK(back.r == g.spec.rank && back.lora_alpha == g.spec.alpha && back.targets == g.spec.targets &&
        back.use_rslora == g.spec.rslora);
  CHECK(interop::import_peft_adapter(out, g.base.dims, g.spec) == g.adapters);
  fs::remove_all(out);
}

void merged_matches_peft(const lora_golden::Golden& g) {
  std::vector<float> merged = g.base.full;
  interop::merge_lora(g.base.dims, g.spec, g.adapters.data(), merged.data());
  Model plain(g.base.dims);
  plain.set_params_from_full(merged.data());
  const hf_golden::Reference ref(g.dir);
  const std::vector<int32_t> inputs = ref.i32("inputs"), targets = ref.i32("targets");
  plain.forward(inputs.data(), targets.data(), 2, 16);
  const std::vector<float> want = ref.f32("merged.logits");
  const double d = hf_golden::max_abs_diff(hf_golden::logits_of(plain, 32), want) / hf_golden::max_abs(want);
  CHECK_MSG(d <= 1e-5, "%s: merged-model logits differ from PEFT's merge_and_unload by %.3g", g.name.c_str(),
            d);
  // The merged Hugging Face folder reads back as the merged parameters.
  const std::string out = std::string(FLOTILLA_TEST_TMP) + "/lora-golden-merged-" + g.name;
  fs::remove_all(out);
  interop::HfExportOptions o;
  o.dtype = "fp32";
  o.source_folder = g.base.dir;
  interop::export_hf_folder(out, g.base.dims, merged.data(), o);
  CHECK(interop::import_hf_weights(out, g.base.dims) == merged);
  CHECK(!fs::exists(out + "/adapter_config.json"));
  fs::remove_all(out);
  std::printf("%-6s merged W + s B A: logits %.2e (relative) against PEFT's merge_and_unload\n",
              g.name.c_str(), d);
}

}  // namespace

int main() {
  for (const char* name : {"llama", "qwen2", "qwen3"}) {
    const lora_golden::Golden g = lora_golden::load(name);
    ModelOptions o;
    o.lora = g.spec;
    Model m(g.base.dims, ModelShard{}, nullptr, o);
    CHECK(m.layout().adapters() && m.num_params() == g.adapters.size() &&
          m.num_base_params() == g.base.full.size());
    lora_golden::check_model(g, m);
    export_matches_golden(g);
    merged_matches_peft(g);
  }
  return flotilla_test::summary("lora_golden");
}
