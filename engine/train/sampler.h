// Text generation from a model: temperature and top-k sampling over the real vocabulary, with the
// trainer's Rng so samples are reproducible and part of the resumable state.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/core/rng.h"
#include "engine/model/gpt.h"

namespace flotilla {

struct SampleOptions {
  int tokens = 64;           // tokens to generate
  float temperature = 1.0f;  // 0 = greedy
  int top_k = 0;             // 0 = no top-k filter
};

// Continues `prompt` (non-empty; ids < vocab) and returns only the generated ids. The context is
// the last max_seq_len tokens. The model's activations are overwritten.
std::vector<int32_t> sample_tokens(Model& model, const std::vector<int32_t>& prompt,
                                   const SampleOptions& options, Rng& rng);

}  // namespace flotilla
