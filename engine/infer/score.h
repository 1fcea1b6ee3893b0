// Log-likelihood scoring: the log-probability the model gives each token of a sequence after a
// given point, and whether it was the model's greedy choice. The one primitive multiple-choice
// evaluation (lm-evaluation-harness's loglikelihood requests) and sliding-window perplexity build
// on (engine/eval/).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/model/gpt.h"

namespace flotilla::infer {

struct ScoreRequest {
  // The tokens fed and predicted: input ids[0..n-2], target ids[1..n-1]; 2 <= n <= max_seq_len + 1.
  std::vector<int32_t> ids;
  size_t first = 1;  // the first scored token (>= 1): ids[first..n-1] are scored, each on its prefix
};

struct TokenScores {
  std::vector<double> logprob;  // log p(ids[i] | ids[0..i-1]) for i = first..n-1 (natural log)
  std::vector<uint8_t> greedy;  // 1 where ids[i] was the most likely id (ties: the smaller id)
  double sum() const;
  bool all_greedy() const;
};

// Scores every request, up to `max_batch` rows per forward (right-padded; causal attention keeps the
// padding out of every scored position). Log-softmax in double over the real vocabulary. Throws
// Error(kUsage) for a request outside the bounds above or an id outside the vocabulary.
std::vector<TokenScores> score(Model& model, const std::vector<ScoreRequest>& requests, int max_batch = 8);

}  // namespace flotilla::infer
