// A Llama-family model in and out of a Hugging Face folder: the config.json <-> [model] mapping, and
// the safetensors tensors <-> the engine's parameter layout (engine/model/llama.h).
//
// Decision: the engine fuses q/k/v into one projection and gate/up into another (one matmul and one
// column-parallel split each); import copies q_proj, k_proj, v_proj (and gate_proj, up_proj) into
// consecutive row blocks of the fused tensor and export splits them back, so no transposes or
// permutations happen anywhere (HF stores nn.Linear weights [out, in] like the engine, and the
// engine's RoPE is HF's rotate-half convention natively). A folder whose tensors the layout does not
// account for is refused naming them; a tied head's stored lm_head.weight is ignored.
#pragma once

#include <string>
#include <vector>

#include "engine/config/run_config.h"
#include "engine/interop/hf_config.h"
#include "engine/model/base_weights.h"
#include "engine/model/model_dims.h"

namespace flotilla::interop {

// Whether `path` is a folder with a config.json (what model.init_from names for a HF model).
bool is_hf_folder(const std::string& path);

// The dtype an export keeps by default: the source's. A run that starts from a Hugging Face folder
// (`init_from`) keeps that folder's config.json dtype when it is bfloat16 or float32; any other run
// fp32, the dtype of its checkpoint's weights (never rounded unasked). Returns "bf16" or "fp32";
// `why` (may be null) gets the reason in words ("the dtype of /models/qwen", "the checkpoint's").
std::string source_dtype(const std::string& init_from, std::string* why);

// The [model] keys that describe `c`: arch "llama" and every shape key (preset "custom").
// Throws Error(kConfig) for what the engine cannot run (an o_proj bias), naming the key.
ModelSection hf_model_section(const HfConfig& c);
// When cfg.model.init_from is a Hugging Face folder: sets every shape key of cfg.model from its
// config.json (the folder decides the architecture; model.preset becomes "custom") and returns
// true; else false, unchanged.
bool apply_hf_init_from(RunConfig& cfg);

// The whole model's fp32 parameters (ParamLayout(d).full_params() floats) read from the folder,
// padding rows zero; d must be hf_model_section(read_hf_config(folder)). Errors name the tensor
// and the file.
std::vector<float> import_hf_weights(const std::string& folder, const ModelDims& d);

// The frozen base of a (Q)LoRA run read from the folder tensor by tensor (base_weights.h): with
// nf4 each projection module (q_proj, ..., down_proj) of layers [layer_begin, layer_end) (-1: all)
// is quantised as soon as it is read and only its NF4 form is kept (the other layers' projections
// are not read at all), so the peak is the quantised base, the non-projection tensors and one
// module in flight; without nf4 every tensor is kept in fp32. Errors as import_hf_weights'.
BaseWeights load_hf_base(const std::string& folder, const ModelDims& d, bool nf4, bool double_quant,
                         int layer_begin = 0, int layer_end = -1);

// Where each Hugging Face tensor of a model of dims `d` lives in the engine's full parameter vector:
// `count` floats at `offset`, stored as `shape` (row-major, as the HF tensor).
struct HfTensorSpan {
  std::string name;
  std::vector<int64_t> shape;
  size_t offset = 0, count = 0;
};
std::vector<HfTensorSpan> hf_tensor_spans(const ModelDims& d);

// The config.json a model of dims `d` exports with: `source` (the folder it was initialised from)
// when given, with the shape keys checked against d, else built from d.
HfConfig hf_config_for(const ModelDims& d, const HfConfig* source);

struct HfExportOptions {
  std::string dtype = "bf16";  // "bf16" or "fp32"
  std::string source_folder;   // init_from folder: its config.json keys and tokenizer files are carried over
  std::string tokenizer_folder;  // tokenizer files from here instead (e.g. a data prepare --tokenizer folder)
};
// Writes DIR as a Hugging Face folder (config.json, generation_config.json, safetensors, the source's
// tokenizer files) that AutoModelForCausalLM.from_pretrained(DIR) loads; `full` holds the whole
// model's parameters in the engine's layout. Returns the files written.
std::vector<std::string> export_hf_folder(const std::string& dir, const ModelDims& d, const float* full,
                                          const HfExportOptions& options);

}  // namespace flotilla::interop
