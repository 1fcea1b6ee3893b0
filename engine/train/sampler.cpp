// Autoregressive sampling by full recomputation of the context (no KV cache: the CPU models that
// sample inside a training run are small, and it keeps the model's single code path).
#include "engine/train/sampler.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace flotilla {

std::vector<int32_t> sample_tokens(Model& model, const std::vector<int32_t>& prompt,
                                   const SampleOptions& options, Rng& rng) {
  const ModelDims& d = model.dims();
  std::vector<int32_t> context = prompt;
  std::vector<int32_t> generated;
  std::vector<double> probs(static_cast<size_t>(d.vocab_size));
  for (int i = 0; i < options.tokens; ++i) {
    const int T = static_cast<int>(std::min<size_t>(context.size(), static_cast<size_t>(d.max_seq_len)));
    const int32_t* window = context.data() + (context.size() - static_cast<size_t>(T));
    model.forward(window, nullptr, 1, T);
    const float* logits = model.logits() + static_cast<size_t>(T - 1) * static_cast<size_t>(d.padded_vocab);
    int32_t next = 0;
    if (options.temperature <= 0.0f) {
      next = static_cast<int32_t>(std::max_element(logits, logits + d.vocab_size) - logits);
    } else {
      double threshold = -INFINITY;
      if (options.top_k > 0 && options.top_k < d.vocab_size) {
        std::vector<float> sorted(logits, logits + d.vocab_size);
        std::nth_element(sorted.begin(), sorted.begin() + (options.top_k - 1), sorted.end(),
                         std::greater<float>());
        threshold = sorted[static_cast<size_t>(options.top_k - 1)];
      }
      const double maxv = *std::max_element(logits, logits + d.vocab_size);
      double sum = 0;
      for (int v = 0; v < d.vocab_size; ++v) {
        const double p = logits[v] >= threshold ? std::exp((logits[v] - maxv) / options.temperature) : 0.0;
        probs[static_cast<size_t>(v)] = p;
        sum += p;
      }
      if (options.top_p > 0.0f && options.top_p < 1.0f) {
        // Nucleus: the most likely tokens, in order, until their mass reaches top_p (at least one;
        // ties broken by the smaller id, so the cut is deterministic); the rest get 0.
        std::vector<int32_t> order;
        for (int v = 0; v < d.vocab_size; ++v)
          if (probs[static_cast<size_t>(v)] > 0) order.push_back(v);
        std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
          const double pa = probs[static_cast<size_t>(a)], pb = probs[static_cast<size_t>(b)];
          return pa != pb ? pa > pb : a < b;
        });
        double kept = 0;
        size_t n = 0;
        while (n < order.size() && (n == 0 || kept < options.top_p * sum))
          kept += probs[static_cast<size_t>(order[n++])];
        for (size_t k = n; k < order.size(); ++k) probs[static_cast<size_t>(order[k])] = 0;
        sum = kept;
      }
      double u = rng.uniform_double() * sum;
      next = d.vocab_size - 1;
      for (int v = 0; v < d.vocab_size; ++v) {
        u -= probs[static_cast<size_t>(v)];
        if (u < 0) {
          next = v;
          break;
        }
      }
    }
    context.push_back(next);
    generated.push_back(next);
    if (options.on_token && !options.on_token(next)) break;
    if (std::find(options.stop_ids.begin(), options.stop_ids.end(), next) != options.stop_ids.end()) break;
  }
  return generated;
}

}  // namespace flotilla
