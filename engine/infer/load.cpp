// Loading a model for inference (see load.h).
#include "engine/infer/load.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/backend/registry.h"
#include "engine/checkpoint/model_checkpoint.h"
#include "engine/config/config_io.h"
#include "engine/core/error.h"
#include "engine/data/run_tokenizer.h"
#include "engine/interop/gpt2_safetensors.h"
#include "engine/interop/hf_config.h"
#include "engine/interop/hf_model.h"
#include "engine/interop/model_source.h"
#include "engine/interop/peft.h"
#include "engine/model/base_weights.h"
#include "engine/model/model_dims.h"

namespace flotilla::infer {

namespace fs = std::filesystem;

namespace {

// The run's tokenizer for a checkpoint: the run folder's config.toml (step-N/../../), found as the
// run found it (run_tokenizer.h); "" when there is no config or no tokenizer.
std::string checkpoint_tokenizer(const std::string& step_dir) {
  const fs::path config = fs::path(step_dir).parent_path().parent_path() / "config.toml";
  std::error_code ec;
  if (!fs::is_regular_file(config, ec)) return {};
  try {
    return run_tokenizer_path(load_config_file(config.string()));
  } catch (const Error&) {
    return {};  // a config this build cannot read: no tokenizer, ids only
  }
}

bool holds_tokenizer(const std::string& dir) {
  std::error_code ec;
  const fs::path d(dir);
  return fs::exists(d / "tokenizer.json", ec) || (fs::exists(d / "vocab.json", ec) && fs::exists(d / "merges.txt", ec)) ||
         fs::exists(d / "tokenizer.flotilla.json", ec);
}

// config.json says model_type "gpt2" (issue 35's eval: GPT-2 folders for `eval --model`).
bool is_gpt2_folder(const std::string& folder) {
  std::ifstream in(fs::path(folder) / "config.json");
  if (!in) return false;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  return j.is_object() && j.value("model_type", "") == "gpt2";
}

}  // namespace

LoadedModel load_for_inference(const LoadRequest& request) {
  if (request.checkpoint.empty() == request.hf_model.empty())
    throw Error(ExitCode::kUsage, "give one of --checkpoint DIR (a run's checkpoint) or --model HF_DIR "
                                  "(a Hugging Face folder or org/name)");
  if (request.device != "cpu" && request.device != "cuda")
    throw Error(ExitCode::kUsage, "--device takes cpu or cuda, not '" + request.device + "'");
  // The CUDA backend (the plugin) is loaded only when asked for; it throws naming what is missing.
  Backend* backend = request.device == "cuda" ? &get_backend("cuda") : nullptr;
  LoadedModel out;
  if (!request.checkpoint.empty()) {
    ModelCheckpoint ck = load_model_checkpoint(request.checkpoint, &out.warnings);
    ModelOptions mo;
    mo.lora = ck.lora;
    out.model = std::make_unique<Model>(ck.dims, ModelShard{}, backend, mo);
    if (ck.lora.enabled()) {
      out.model->set_base(interop::load_lora_base_weights(ck));
      out.description = std::string(ck.lora.nf4 ? "QLoRA" : "LoRA") + " r " + std::to_string(ck.lora.rank) + " on " +
                        lora_targets_text(ck.lora.targets) + " (base " + ck.init_from +
                        (ck.lora.nf4 ? (ck.lora.double_quant ? ", quantised to 4-bit NF4 with double quantisation"
                                                             : ", quantised to 4-bit NF4")
                                     : "") +
                        ")";
    }
    out.model->set_params_from_full(ck.params.data());
    out.source = ck.dir;
    out.step = ck.step;
    out.tokenizer = checkpoint_tokenizer(ck.dir);
    if (out.description.empty())
      out.description = "checkpoint " + ck.dir + " (step " + std::to_string(ck.step) + ")";
  } else {
    const std::string folder = interop::local_model_folder(request.hf_model, "--model");
    // A GPT-2 folder (model_type "gpt2", GPT2LMHeadModel.save_pretrained's one model.safetensors) is
    // read by the GPT-2 importer into the engine's own GPT-2; every other one as the Llama family.
    ModelDims dims;
    std::vector<float> full;
    if (is_gpt2_folder(folder)) {
      const std::string weights = (fs::path(folder) / "model.safetensors").string();
      dims = interop::infer_dims_from_safetensors(weights);
      full = interop::import_gpt2_safetensors(weights, dims);
    } else {
      dims = dims_from_config(interop::hf_model_section(interop::read_hf_config(folder)));
      full = interop::import_hf_weights(folder, dims);
    }
    out.model = std::make_unique<Model>(dims, ModelShard{}, backend, ModelOptions{});
    out.model->set_params_from_full(full.data());
    out.source = folder;
    if (holds_tokenizer(folder)) out.tokenizer = folder;
    out.description = "Hugging Face model " + request.hf_model;
  }
  out.model->set_training(false);
  return out;
}

}  // namespace flotilla::infer
