// GptShard is ModelShard (model_shard.h); the shard geometry helpers taking dims, for any
// architecture (they build the ParamLayout of `d`: param_layout.h has the versions taking one).
#pragma once

#include <vector>

#include "engine/model/gpt.h"
#include "engine/model/model_shard.h"
#include "engine/model/param_layout.h"

namespace flotilla {

using GptShard = ModelShard;

std::vector<ShardRun> shard_runs(const ModelDims& d, const ModelShard& s, int tensor);
std::vector<size_t> local_param_sizes(const ModelDims& d, const ModelShard& s);
void full_to_shard(const ModelDims& d, const ModelShard& s, const float* full, float* local);
void shard_to_full(const ModelDims& d, const ModelShard& s, const float* local, float* full);
bool counts_once(const ModelDims& d, const ModelShard& s, int tensor);

}  // namespace flotilla
