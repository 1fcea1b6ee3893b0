// LoRA adapters in and out of PEFT's folder format (adapter_config.json + adapter_model.safetensors),
// and the merge of an adapter into its base (docs/lora.md).
//
// PEFT names each tensor after the module it adapts, e.g.
// base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight ([r, in]) and ...lora_B.weight
// ([out, r]); the engine keeps the same tensors in its adapter table (engine/model/lora.h:
// lora_A.<target> (L, r, in), lora_B.<target> (L, out, r)), so import and export are copies, one
// layer slice at a time, and the merged weight of a target is W + s * B A.
#pragma once

#include <string>
#include <vector>

#include "engine/checkpoint/model_checkpoint.h"
#include "engine/config/run_config.h"
#include "engine/model/base_weights.h"
#include "engine/model/lora.h"
#include "engine/model/model_dims.h"

namespace flotilla::interop {

// What an adapter_config.json says (the keys the engine reads).
struct PeftAdapterConfig {
  std::string peft_type;  // "LORA"
  std::string task_type;  // "CAUSAL_LM"
  int r = 0;
  double lora_alpha = 0;
  double lora_dropout = 0;
  bool use_rslora = false;
  uint32_t targets = 0;  // LoraTarget bits (target_modules: a list, or "all-linear")
  std::string base_model_name_or_path;
  std::string revision;  // the base's revision on the Hub ("" when none is given)
};

// Reads DIR/adapter_config.json. Throws Error(kConfig) naming the file and the key for anything the
// engine cannot train or load as it is (not LORA, DoRA, a bias other than "none", fan_in_fan_out,
// rank_pattern / alpha_pattern, layers_to_transform, modules_to_save, a target module that is not a
// Llama projection, ...): never crashes on a malformed file.
PeftAdapterConfig read_peft_adapter_config(const std::string& dir);
// The same on the file's text; `path` names it in errors (the fuzz target's entry point).
PeftAdapterConfig parse_peft_adapter_config(const std::string& text, const std::string& path);

// When cfg.lora.init_from names an adapter folder: sets lora.rank, lora.alpha, lora.targets and
// lora.use_rslora from its adapter_config.json. A [lora] key set to a value other than its default
// and the adapter's is refused by name (Error(kConfig)). Returns true when it applied one.
bool apply_lora_init_from(RunConfig& cfg);

// The whole model's adapter vector (ParamLayout(d, spec).full_params() floats, the adapter table's
// order) read from DIR/adapter_model.safetensors (F32, F16 or BF16). Every tensor the spec needs
// must be there with its shape, and nothing else; errors name the tensor and the file.
std::vector<float> import_peft_adapter(const std::string& dir, const ModelDims& d, const LoraSpec& spec);

struct PeftExportOptions {
  std::string dtype = "fp32";           // "fp32" or "bf16": the adapter tensors' storage
  std::string base_model_name_or_path;  // written into adapter_config.json (a Hub name: the repo id
                                        // as base_model_name_or_path, its revision as revision)
};
// Writes DIR as a folder PeftModel.from_pretrained(base, DIR) loads: adapter_config.json and
// adapter_model.safetensors with PEFT's tensor names, crash-safely (a new folder swapped in whole).
// `adapters` is the whole model's adapter vector. Returns the files written.
std::vector<std::string> export_peft_adapter(const std::string& dir, const ModelDims& d, const LoraSpec& spec,
                                             const float* adapters, const PeftExportOptions& options);

// base (ParamLayout(d).full_params() floats) += s * B A for every adapted projection of every layer
// (fp32 products accumulated in double), in place: the merged model's parameters.
void merge_lora(const ModelDims& d, const LoraSpec& spec, const float* adapters, float* base);

// The model a checkpoint describes as one full fp32 parameter vector (ParamLayout(dims)): its params
// (full training), or under LoRA its base (model.init_from, read again and refused, naming the file,
// when its weights changed since the run recorded them) with the adapters merged in. A QLoRA
// checkpoint (lora.base_quant = "nf4") merges onto the base its adapters were trained over: every
// projection dequantised from its NF4 quantisation (fp32, bitsandbytes' dequantize_4bit), the
// embedding, norms and head as the folder has them.
std::vector<float> merged_model_params(const ModelCheckpoint& c);
// How an export describes the merge of `spec`'s adapter ("the LoRA adapter merged into its base", and
// for QLoRA that the base was dequantised from 4-bit NF4, so the weights are not the original ones).
std::string merged_export_note(const LoraSpec& spec);
// LoRA: the checkpoint's frozen base, read from init_from and checked against its fingerprint.
std::vector<float> load_lora_base(const ModelCheckpoint& c);
// The same as the run held it (base_weights.h): under QLoRA (c.lora.nf4) streamed and quantised
// module by module, never whole in fp32 (sample's base); else every tensor in fp32.
BaseWeights load_lora_base_weights(const ModelCheckpoint& c);

// A fingerprint of a base model's weight files (a Hugging Face folder's *.safetensors, or one weights
// file): one line "name size crc32c" per file, sorted, so a checkpoint can refuse a changed base.
std::string base_weights_fingerprint(const std::string& init_from);
// The first file whose line differs between two fingerprints, with what changed, or "" when equal.
std::string fingerprint_difference(const std::string& saved, const std::string& now);

}  // namespace flotilla::interop
