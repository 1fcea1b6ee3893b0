// Text samples a run writes as token ids (the worker has no tokenizer at hand: its `sample`
// records carry ids and an empty text), decoded with the run's own tokenizer.
//
// Decision: a run's tokenizer is found, not configured (engine/data/run_tokenizer.h, the one rule
// the worker uses too); a run with none (the synthetic demo) shows its ids.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/config/run_config.h"

namespace flotilla {
class Tokenizer;
}

namespace flotilla::runs {

// The folder (or file) holding the run's tokenizer; "" when none is found.
std::string run_tokenizer_path(const RunConfig& config);

// What to ask `flotilla-worker sample` for (the app's Sample dialog and `flotilla runs sample`
// build the same command from it). With a tokenizer the prompt is text and the worker decides the
// chat format (chat "auto": a tokenizer folder with a chat template); without one (the synthetic
// demo) the prompt is token ids ("" starts at token 0) and the answer is ids.
struct SampleRequest {
  std::string checkpoint;  // a step-N, checkpoints or run folder
  std::string tokenizer;   // run_tokenizer_path; "" none
  std::string prompt;
  std::string system;         // chat: a system turn first ("" none)
  std::string chat = "auto";  // auto | on | off
  double temperature = 0.7;   // 0 = greedy
  int top_k = 40;             // 0 = all tokens
  double top_p = 0.95;        // 1 = all tokens
  int tokens = 128;           // most new tokens
  std::vector<std::string> stops;
  uint64_t seed = 1;
  bool special = false;  // keep special tokens in the answer
  bool json = false;     // one JSON object at the end instead of the streamed answer
};
// The worker's arguments (after the program): `sample --checkpoint ...`.
std::vector<std::string> sample_worker_args(const SampleRequest& request);
// Whether the tokenizer's folder has a chat template (the worker's chat "auto" then wraps prompts).
bool has_chat_template(const std::string& tokenizer_path);

class SampleDecoder {
 public:
  // Loads the tokenizer at `path` ("" = none: samples are shown as ids). A tokenizer that does
  // not load is reported by error() and samples are shown as ids.
  explicit SampleDecoder(const std::string& path);
  ~SampleDecoder();

  bool has_tokenizer() const { return tokenizer_ != nullptr; }
  const std::string& error() const { return error_; }
  // The sample's text: `text` when the worker wrote one, else the ids decoded, else the ids
  // written out ("ids: 12 7 99").
  std::string text(const std::vector<int32_t>& ids, const std::string& text) const;

 private:
  std::unique_ptr<Tokenizer> tokenizer_;
  std::string error_;
};

}  // namespace flotilla::runs
