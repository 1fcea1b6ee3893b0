// Inference over a Model: batched generation (the prompt's prefill, then one token at a time) and
// the one sampling rule every generator uses (the CLI's sample, the trainer's samples, evaluation's
// generation tasks, the app's chat playground). docs/eval.md.
//
// Decision: rows are independent. Each row has its own random stream (row r of seed s draws what a
// lone prompt with seed s + r would), so a prompt's output does not depend on what it is batched
// with; greedy rows are deterministic whatever the batch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/core/rng.h"
#include "engine/model/gpt.h"

namespace flotilla::infer {

struct GenerateOptions {
  int max_tokens = 64;        // most new tokens per row
  float temperature = 1.0f;   // 0: greedy (the most likely id; ties: the smaller id)
  int top_k = 0;              // keep the k most likely ids; 0: all
  float top_p = 1.0f;         // nucleus: the most likely ids whose mass reaches top_p; 1: all
  // transformers' RepetitionPenaltyLogitsProcessor: every id already in the row (prompt and
  // generated) has its logit divided by the penalty when positive, multiplied when negative,
  // before temperature, top-k and top-p. 1: off.
  float repetition_penalty = 1.0f;
  std::vector<int32_t> stop_ids;  // any of them ends its row (the last id returned)
  uint64_t seed = 1;              // row r draws from Rng(seed + r)
  // false: every token recomputes the whole context with Model::forward (the reference the KV
  // cache is tested against); true: the KV cache where the model has it.
  // The KV cache path: the prompts are prefilled together (right-padded to the longest), then each
  // live row gets one token per step. A row whose context reaches max_seq_len is re-prefilled alone
  // with its last max_seq_len tokens at every further step: exactly the recompute path's window (so
  // outputs stay identical), at the recompute path's cost for that row.
  bool use_cache = true;
  // One prompt only: draw from this stream (the trainer's resumable Rng) instead of Rng(seed).
  Rng* rng = nullptr;
};

enum class StopReason { kLength, kEndToken, kCaller };
const char* stop_reason_name(StopReason r);  // "length", "end token", "caller"

struct Generation {
  std::vector<int32_t> ids;  // generated ids only, the end token included
  StopReason stop = StopReason::kLength;
};

// Called with each row's next id as it is chosen (rows in order within a step); returning false ends
// that row after this id (a stop string, a cancel).
using TokenCallback = std::function<bool(size_t row, int32_t id)>;

// Continues every prompt (each non-empty, ids < vocab). The context of a row is its last
// max_seq_len tokens. The model's activations are overwritten; the model should be in evaluation
// mode (set_training(false)).
std::vector<Generation> generate(Model& model, const std::vector<std::vector<int32_t>>& prompts,
                                 const GenerateOptions& options, const TokenCallback& on_token = {});

// The sampling rule on one row of logits (vocab floats, the real vocabulary): repetition penalty
// over `history`, then greedy or temperature / top-k / top-p, drawing from `rng`.
int32_t choose_token(const float* logits, int vocab, const GenerateOptions& options,
                     const std::vector<int32_t>& history, Rng& rng);

}  // namespace flotilla::infer
