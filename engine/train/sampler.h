// Text generation from a model: temperature, top-k and top-p sampling over the real vocabulary,
// with the trainer's Rng so samples are reproducible and part of the resumable state, stopping at
// the end-of-turn / end-of-text tokens it is given.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/core/rng.h"
#include "engine/model/gpt.h"

namespace flotilla {

struct SampleOptions {
  int tokens = 64;           // most tokens to generate
  float temperature = 1.0f;  // 0 = greedy
  int top_k = 0;             // 0 = no top-k filter
  float top_p = 1.0f;        // nucleus: keep the most likely tokens whose mass reaches top_p; 1 = all
  // Generation ends after any of these ids (it is the last id returned): the tokenizer's EOS and
  // the chat format's end of turn (stop_token_ids in data/chat_format.h). Empty: never early.
  std::vector<int32_t> stop_ids;
  // Called with each id as it is chosen; returning false ends generation after it (stop strings).
  std::function<bool(int32_t)> on_token;
};

// Continues `prompt` (non-empty; ids < vocab) and returns only the generated ids. The context is
// the last max_seq_len tokens. The model's activations are overwritten.
std::vector<int32_t> sample_tokens(Model& model, const std::vector<int32_t>& prompt,
                                   const SampleOptions& options, Rng& rng);

}  // namespace flotilla
