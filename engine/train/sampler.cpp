// Autoregressive sampling for the trainer's text samples: infer::generate on one prompt (its KV
// cache path), drawing from the trainer's Rng so samples are reproducible and part of the resumable
// state.
#include "engine/train/sampler.h"

#include "engine/infer/generate.h"

namespace flotilla {

std::vector<int32_t> sample_tokens(Model& model, const std::vector<int32_t>& prompt,
                                   const SampleOptions& options, Rng& rng) {
  infer::GenerateOptions go;
  go.max_tokens = options.tokens;
  go.temperature = options.temperature;
  go.top_k = options.top_k;
  go.top_p = options.top_p;
  go.stop_ids = options.stop_ids;
  go.rng = &rng;
  infer::TokenCallback cb;
  if (options.on_token) cb = [&](size_t, int32_t id) { return options.on_token(id); };
  return infer::generate(model, {prompt}, go, cb)[0].ids;
}

}  // namespace flotilla
