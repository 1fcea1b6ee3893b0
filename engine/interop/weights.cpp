// Format detection and dispatch for pretrained-weight files (see weights.h).
#include "engine/interop/weights.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/core/error.h"
#include "engine/interop/gpt2_safetensors.h"
#include "engine/interop/llmc.h"
#include "engine/interop/model_source.h"

namespace flotilla::interop {

const char* weight_format_name(WeightFormat f) { return f == WeightFormat::kLlmc ? "llmc" : "safetensors"; }

WeightFormat detect_weight_format(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_data(path + ": cannot open the weights file");
  unsigned char head[9] = {};
  in.read(reinterpret_cast<char*>(head), sizeof head);
  const std::streamsize got = in.gcount();
  int32_t magic = 0;
  if (got >= 4) std::memcpy(&magic, head, 4);
  if (magic == kLlmcModelMagic) return WeightFormat::kLlmc;
  if (got == 9 && head[8] == '{') return WeightFormat::kSafetensors;
  throw_data(path + ": neither an llm.c model (.bin, magic 20240326) nor a safetensors file");
}

ModelDims infer_weight_dims(const std::string& path, int n_head) {
  if (detect_weight_format(path) == WeightFormat::kLlmc) {
    ModelDims d = read_llmc_header(path).dims;
    d.padded_vocab = pad_vocab(d.vocab_size);  // our padding, whatever the file used
    return d;
  }
  return infer_dims_from_safetensors(path, n_head);
}

std::vector<float> import_weights(const std::string& path_or_name, const ModelDims& d, bool crop_positions) {
  // A Hub name (a GPT-2 repo): its snapshot's model.safetensors.
  std::string path = local_model_folder(path_or_name, "model.init_from");
  if (path != path_or_name) path = (std::filesystem::path(path) / "model.safetensors").string();
  if (detect_weight_format(path) == WeightFormat::kLlmc) return import_llmc(path, d);
  return import_gpt2_safetensors(path, d, crop_positions);
}

}  // namespace flotilla::interop
