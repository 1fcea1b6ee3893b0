// Autoregressive sampling by full recomputation of the context (no KV cache: the CPU models that
// sample inside a training run are small, and it keeps the model's single code path).
#include "engine/train/sampler.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "engine/infer/generate.h"

namespace flotilla {

std::vector<int32_t> sample_tokens(Model& model, const std::vector<int32_t>& prompt,
                                   const SampleOptions& options, Rng& rng) {
  const ModelDims& d = model.dims();
  std::vector<int32_t> context = prompt;
  std::vector<int32_t> generated;
  for (int i = 0; i < options.tokens; ++i) {
    const int T = static_cast<int>(std::min<size_t>(context.size(), static_cast<size_t>(d.max_seq_len)));
    const int32_t* window = context.data() + (context.size() - static_cast<size_t>(T));
    model.forward(window, nullptr, 1, T);
    const float* logits = model.logits() + static_cast<size_t>(T - 1) * static_cast<size_t>(d.padded_vocab);
    infer::GenerateOptions go;
    go.temperature = options.temperature;
    go.top_k = options.top_k;
    go.top_p = options.top_p;
    const int32_t next = infer::choose_token(logits, d.vocab_size, go, context, rng);
    context.push_back(next);
    generated.push_back(next);
    if (options.on_token && !options.on_token(next)) break;
    if (std::find(options.stop_ids.begin(), options.stop_ids.end(), next) != options.stop_ids.end()) break;
  }
  return generated;
}

}  // namespace flotilla
