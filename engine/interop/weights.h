// Pretrained-weight files for `model.init_from`: detect the format by content and import.
//
// Decision: the format is told by the file's bytes, not its name: an llm.c model starts with the
// int32 magic 20240326; a safetensors file starts with a little-endian u64 header length followed
// by '{'. A renamed file still loads, and anything else fails with what was found.
#pragma once

#include <string>
#include <vector>

#include "engine/model/gpt.h"

namespace flotilla::interop {

enum class WeightFormat { kSafetensors, kLlmc };

const char* weight_format_name(WeightFormat f);  // "safetensors" / "llmc"

// Throws Error(kData) when the file is neither.
WeightFormat detect_weight_format(const std::string& path);

// The model dimensions stored in (or implied by) the file; n_head > 0 overrides for safetensors,
// which does not record it.
ModelDims infer_weight_dims(const std::string& path, int n_head = 0);

// Parameters in our padded layout for `d`; errors name the mismatched tensor or header field.
std::vector<float> import_weights(const std::string& path, const ModelDims& d, bool crop_positions = false);

}  // namespace flotilla::interop
