// GPT-2 weights <-> safetensors with Hugging Face names and layouts (the `gpt2` model repo's
// model.safetensors, i.e. transformers' GPT2Model state dict).
//
//   wte.weight (V, C)          real vocabulary rows only (our padded rows are dropped / zeroed)
//   wpe.weight (maxT, C)
//   h.{i}.ln_1.weight / .bias (C)
//   h.{i}.attn.c_attn.weight (C, 3C)  h.{i}.attn.c_attn.bias (3C)
//   h.{i}.attn.c_proj.weight (C, C)   h.{i}.attn.c_proj.bias (C)
//   h.{i}.ln_2.weight / .bias (C)
//   h.{i}.mlp.c_fc.weight (C, 4C)     h.{i}.mlp.c_fc.bias (4C)
//   h.{i}.mlp.c_proj.weight (4C, C)   h.{i}.mlp.c_proj.bias (C)
//   ln_f.weight / .bias (C)
//
// Decision: HF GPT-2 uses Conv1D, whose weight is (in, out): the TRANSPOSE of our (and llm.c's,
// torch.nn.Linear's) (out, in). Export transposes the four matmul weights per layer; import
// transposes back. Import also accepts a "transformer." prefix (GPT2LMHeadModel.save_pretrained),
// F16/BF16/F64 data (converted to fp32), and ignores the attn.bias / attn.masked_bias buffers and a
// tied lm_head.weight. Any other unexpected tensor is an error, so a non-GPT-2 file never half-loads.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "engine/model/gpt.h"

namespace flotilla::interop {

// Writes `params` (num_parameters(d) floats, our padded layout) as F32 safetensors with HF names.
// Metadata always carries {"format": "pt"} (transformers requires it) plus `extra_metadata`.
void export_gpt2_safetensors(const std::string& path, const ModelDims& d, const float* params,
                             const std::map<std::string, std::string>& extra_metadata = {});

// Dimensions from the tensor shapes. n_head is not stored in the weights: n_head > 0 is used as
// given, else "n_head" from a config.json next to the file, else n_embd / 64 (GPT-2's head size).
ModelDims infer_dims_from_safetensors(const std::string& path, int n_head = 0);

// Reads the file into our padded layout for `d` (padded vocab rows zero). A missing or mis-shaped
// tensor throws Error(kData) naming it with the expected and the actual shape. With crop_positions, a
// file with more positions than d.max_seq_len loads its first d.max_seq_len rows of wpe.
std::vector<float> import_gpt2_safetensors(const std::string& path, const ModelDims& d,
                                           bool crop_positions = false);

// A transformers config.json for a GPT2LMHeadModel of dims `d` (activation gelu_new = tanh GELU,
// layer_norm_epsilon 1e-5), so a folder with it and model.safetensors loads with from_pretrained.
std::string hf_gpt2_config_json(const ModelDims& d);

// Names of the HF tensors in our parameter order, e.g. {"wte.weight", "wpe.weight", "h.0.ln_1.weight", ...}.
std::vector<std::string> hf_gpt2_tensor_names(const ModelDims& d);

}  // namespace flotilla::interop
