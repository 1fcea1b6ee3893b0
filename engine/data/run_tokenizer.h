// Where a run's tokenizer is, found rather than configured: the Hugging Face folder the run starts
// from (model.init_from), else the folder of its train shards, which is where `data prepare` and
// the app's Data page leave the tokenizer that made them. The first folder that holds one (a
// tokenizer.json, GPT-2's vocab.json + merges.txt, or tokenizer.flotilla.json) is the run's; a run
// with none (the synthetic demo) has no tokenizer. One rule for the worker (its training-time
// samples stop at the tokenizer's end tokens) and the app (runs/sample_text.h decodes them).
#pragma once

#include <string>

#include "engine/config/run_config.h"

namespace flotilla {

// The folder holding the run's tokenizer; "" when none is found.
std::string run_tokenizer_path(const RunConfig& config);

}  // namespace flotilla
