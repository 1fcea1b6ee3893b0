// Text samples a run writes as token ids (the worker has no tokenizer at hand: its `sample`
// records carry ids and an empty text), decoded with the run's own tokenizer.
//
// Decision: a run's tokenizer is found, not configured: the Hugging Face folder it starts from
// (model.init_from), else the folder of its train shards, which is where `data prepare` and the
// app's Data page leave the tokenizer that made them. The first folder that holds one (a
// tokenizer.json, GPT-2's vocab.json + merges.txt, or tokenizer.flotilla.json) is the run's; a
// run with none (the synthetic demo) shows its ids.
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
