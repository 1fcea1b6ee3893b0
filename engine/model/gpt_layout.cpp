// GPT-2's tensor names and decay groups, and the dims-taking helpers of gpt.h and param_layout.h over
// ParamLayout (so every caller, whatever the architecture, reads one table).
#include <cassert>

#include "engine/model/gpt.h"
#include "engine/model/model_impl.h"
#include "engine/model/param_layout.h"

namespace flotilla {

const char* param_name(int index) {
  static const char* names[kNumParamTensors] = {"wte",      "wpe",      "ln1w", "ln1b", "qkvw", "qkvb",
                                                "attprojw", "attprojb", "ln2w", "ln2b", "fcw",  "fcb",
                                                "fcprojw",  "fcprojb",  "lnfw", "lnfb"};
  assert(index >= 0 && index < kNumParamTensors);
  return names[index];
}

bool is_layer_param(int index) { return index != kWte && index != kWpe && index != kLnfw && index != kLnfb; }

bool param_decays(int index) {
  switch (index) {
    case kWte:
    case kWpe:
    case kQkvw:
    case kAttprojw:
    case kFcw:
    case kFcprojw:
      return true;
    default:
      return false;
  }
}

std::vector<size_t> param_sizes(const ModelDims& d) {
  const ParamLayout layout(d);
  std::vector<size_t> out;
  for (int i = 0; i < layout.size(); ++i) out.push_back(layout.full_size(i));
  return out;
}

size_t num_parameters(const ModelDims& d) { return ParamLayout(d).full_params(); }
size_t num_parameters_unpadded(const ModelDims& d) { return ParamLayout(d).full_params_unpadded(); }

size_t activation_floats(const ModelDims& d, int B, int T, bool recompute) {
  return activation_bytes_for(d, ModelShard{}, B, T, recompute, ModelOptions{}, 64, 1) / sizeof(float);
}

std::vector<ShardRun> shard_runs(const ModelDims& d, const ModelShard& s, int tensor) {
  return shard_runs(ParamLayout(d), s, tensor);
}
std::vector<size_t> local_param_sizes(const ModelDims& d, const ModelShard& s) {
  return local_param_sizes(ParamLayout(d), s);
}
void full_to_shard(const ModelDims& d, const ModelShard& s, const float* full, float* local) {
  full_to_shard(ParamLayout(d), s, full, local);
}
void shard_to_full(const ModelDims& d, const ModelShard& s, const float* local, float* full) {
  shard_to_full(ParamLayout(d), s, local, full);
}
bool counts_once(const ModelDims& d, const ModelShard& s, int tensor) {
  return counts_once(ParamLayout(d), s, tensor);
}

}  // namespace flotilla
