// Batched generation and the sampling rule (see generate.h).
//
// This file holds the reference path: every new token recomputes its row's whole context with
// Model::forward. The KV-cache path (prefill, then one token at a time) is checked against it.
#include "engine/infer/generate.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "engine/core/error.h"

namespace flotilla::infer {

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::kLength: return "length";
    case StopReason::kEndToken: return "end token";
    case StopReason::kCaller: return "caller";
  }
  return "length";
}

int32_t choose_token(const float* logits_in, int vocab, const GenerateOptions& o,
                     const std::vector<int32_t>& history, Rng& rng) {
  const float* logits = logits_in;
  std::vector<float> penalised;
  if (o.repetition_penalty != 1.0f && !history.empty()) {
    penalised.assign(logits_in, logits_in + vocab);
    std::vector<uint8_t> seen(static_cast<size_t>(vocab), 0);
    for (int32_t id : history)
      if (id >= 0 && id < vocab && !seen[static_cast<size_t>(id)]) {
        seen[static_cast<size_t>(id)] = 1;
        float& l = penalised[static_cast<size_t>(id)];
        l = l > 0 ? l / o.repetition_penalty : l * o.repetition_penalty;
      }
    logits = penalised.data();
  }
  if (o.temperature <= 0.0f)
    return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
  double threshold = -INFINITY;
  if (o.top_k > 0 && o.top_k < vocab) {
    std::vector<float> sorted(logits, logits + vocab);
    std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(), std::greater<float>());
    threshold = sorted[static_cast<size_t>(o.top_k - 1)];
  }
  const double maxv = *std::max_element(logits, logits + vocab);
  std::vector<double> probs(static_cast<size_t>(vocab));
  double sum = 0;
  for (int v = 0; v < vocab; ++v) {
    const double p = logits[v] >= threshold ? std::exp((logits[v] - maxv) / o.temperature) : 0.0;
    probs[static_cast<size_t>(v)] = p;
    sum += p;
  }
  if (o.top_p > 0.0f && o.top_p < 1.0f) {
    // Nucleus: the most likely ids, in order, until their mass reaches top_p (at least one; ties
    // broken by the smaller id, so the cut is deterministic); the rest get 0.
    std::vector<int32_t> order;
    for (int v = 0; v < vocab; ++v)
      if (probs[static_cast<size_t>(v)] > 0) order.push_back(v);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      const double pa = probs[static_cast<size_t>(a)], pb = probs[static_cast<size_t>(b)];
      return pa != pb ? pa > pb : a < b;
    });
    double kept = 0;
    size_t n = 0;
    while (n < order.size() && (n == 0 || kept < o.top_p * sum)) kept += probs[static_cast<size_t>(order[n++])];
    for (size_t k = n; k < order.size(); ++k) probs[static_cast<size_t>(order[k])] = 0;
    sum = kept;
  }
  double u = rng.uniform_double() * sum;
  for (int v = 0; v < vocab; ++v) {
    u -= probs[static_cast<size_t>(v)];
    if (u < 0) return v;
  }
  return vocab - 1;
}

std::vector<Generation> generate(Model& model, const std::vector<std::vector<int32_t>>& prompts,
                                 const GenerateOptions& o, const TokenCallback& on_token) {
  const ModelDims& d = model.dims();
  for (size_t r = 0; r < prompts.size(); ++r) {
    if (prompts[r].empty()) throw Error(ExitCode::kUsage, "generate: prompt " + std::to_string(r) + " is empty");
    for (int32_t id : prompts[r])
      if (id < 0 || id >= d.vocab_size)
        throw Error(ExitCode::kUsage, "generate: prompt " + std::to_string(r) + " has token " + std::to_string(id) +
                                          ", outside the model's vocabulary of " + std::to_string(d.vocab_size));
  }
  std::vector<Generation> out(prompts.size());
  std::vector<std::vector<int32_t>> context = prompts;
  std::vector<Rng> rngs;
  for (size_t r = 0; r < prompts.size(); ++r) rngs.emplace_back(o.seed + r);
  std::vector<uint8_t> live(prompts.size(), 1);
  for (int i = 0; i < o.max_tokens; ++i) {
    bool any = false;
    for (size_t r = 0; r < prompts.size(); ++r) {
      if (!live[r]) continue;
      any = true;
      std::vector<int32_t>& ctx = context[r];
      const int T = static_cast<int>(std::min<size_t>(ctx.size(), static_cast<size_t>(d.max_seq_len)));
      model.forward(ctx.data() + (ctx.size() - static_cast<size_t>(T)), nullptr, 1, T);
      const float* logits = model.logits() + static_cast<size_t>(T - 1) * static_cast<size_t>(d.padded_vocab);
      const int32_t next = choose_token(logits, d.vocab_size, o, ctx, rngs[r]);
      ctx.push_back(next);
      out[r].ids.push_back(next);
      if (on_token && !on_token(r, next)) {
        out[r].stop = StopReason::kCaller;
        live[r] = 0;
      } else if (std::find(o.stop_ids.begin(), o.stop_ids.end(), next) != o.stop_ids.end()) {
        out[r].stop = StopReason::kEndToken;
        live[r] = 0;
      }
    }
    if (!any) break;
  }
  return out;
}

}  // namespace flotilla::infer
