// Batched generation and the sampling rule (see generate.h).
//
// Two paths: the reference, where every new token recomputes its row's whole context with
// Model::forward, and the KV-cache path (Model::forward_cached: one batched prefill, then one token
// per live row per step), which tests check against the reference token for token.
//
// Decision: the decode step runs the contiguous range of rows from the first live row to the last
// one, a finished row inside it fed a dummy token at position 0 of its own (unused) cache row: rows
// finish at different steps, and a compact gather would cost a copy of every cache per step.
#include "engine/infer/generate.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "engine/core/error.h"

namespace flotilla::infer {

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::kLength:
      return "length";
    case StopReason::kEndToken:
      return "end token";
    case StopReason::kCaller:
      return "caller";
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
  if (o.temperature <= 0.0f) return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
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
    while (n < order.size() && (n == 0 || kept < o.top_p * sum))
      kept += probs[static_cast<size_t>(order[n++])];
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

namespace {

// Logits of the last forward as host fp32, (rows, Vp).
const float* host_logits(Model& model, size_t rows, std::vector<float>& buf) {
  if (const float* lg = model.logits()) return lg;
  buf.resize(rows * static_cast<size_t>(model.dims().padded_vocab));
  model.copy_logits(buf.data());
  return buf.data();
}

std::vector<Generation> generate_cached(Model& model, const std::vector<std::vector<int32_t>>& prompts,
                                        const GenerateOptions& o, const TokenCallback& on_token,
                                        std::vector<Rng>& rngs) {
  const ModelDims& d = model.dims();
  const int S = d.max_seq_len, R = static_cast<int>(prompts.size());
  const size_t Vp = static_cast<size_t>(d.padded_vocab);
  std::vector<Generation> out(prompts.size());
  std::vector<std::vector<int32_t>> context = prompts;  // the whole history (repetition penalty)
  std::vector<int> filled(prompts.size());              // tokens of the row's window in its cache
  int longest = 0;
  for (int r = 0; r < R; ++r) {
    filled[static_cast<size_t>(r)] =
        static_cast<int>(std::min<size_t>(prompts[static_cast<size_t>(r)].size(), static_cast<size_t>(S)));
    longest = std::max(longest, filled[static_cast<size_t>(r)]);
  }
  // The last generated token is never fed: positions up to longest + max_tokens - 2.
  const int len = static_cast<int>(std::min<long>(S, static_cast<long>(longest) + o.max_tokens - 1));
  model.enable_kv_cache(R, std::max(len, longest));
  struct Release {
    Model& m;
    ~Release() { m.disable_kv_cache(); }
  } release{model};

  std::vector<uint8_t> live(prompts.size(), 1);
  std::vector<float> buf;
  std::vector<int32_t> ids, pos, at;
  // Row r's next id from its logits row; false once the row has ended.
  auto take = [&](size_t r, const float* row) {
    const int32_t next = choose_token(row, d.vocab_size, o, context[r], rngs[r]);
    context[r].push_back(next);
    out[r].ids.push_back(next);
    if (on_token && !on_token(r, next)) {
      out[r].stop = StopReason::kCaller;
      live[r] = 0;
    } else if (std::find(o.stop_ids.begin(), o.stop_ids.end(), next) != o.stop_ids.end()) {
      out[r].stop = StopReason::kEndToken;
      live[r] = 0;
    }
  };

  // Prefill: every row's window, right-padded to the longest (a padded position is overwritten by
  // the row's own decode before any of its queries reads it), logits at each row's last token.
  ids.assign(static_cast<size_t>(R) * static_cast<size_t>(longest), 0);
  pos.resize(ids.size());
  at.resize(static_cast<size_t>(R));
  for (size_t r = 0; r < prompts.size(); ++r) {
    const size_t n = static_cast<size_t>(filled[r]);
    std::copy(prompts[r].end() - static_cast<long>(n), prompts[r].end(),
              ids.begin() + static_cast<long>(r * longest));
    for (int t = 0; t < longest; ++t) pos[r * static_cast<size_t>(longest) + static_cast<size_t>(t)] = t;
    at[r] = static_cast<int32_t>(n) - 1;
  }
  model.forward_cached(ids.data(), pos.data(), R, longest, 0, at.data());
  const float* lg = host_logits(model, prompts.size(), buf);
  for (size_t r = 0; r < prompts.size(); ++r) take(r, lg + r * Vp);

  std::vector<float> rows;  // re-prefilled rows' logits, kept while the step's batch runs
  for (int step = 1; step < o.max_tokens; ++step) {
    int lo = R, hi = -1;
    std::vector<int> full;  // live rows whose context no longer fits: re-prefilled alone
    for (int r = 0; r < R; ++r) {
      if (!live[static_cast<size_t>(r)]) continue;
      if (filled[static_cast<size_t>(r)] >= S) {
        full.push_back(r);
      } else {
        lo = std::min(lo, r);
        hi = std::max(hi, r);
      }
    }
    if (hi < 0 && full.empty()) break;
    rows.assign(full.size() * Vp, 0.0f);
    for (size_t k = 0; k < full.size(); ++k) {
      const size_t r = static_cast<size_t>(full[k]);
      ids.assign(context[r].end() - S, context[r].end());
      pos.resize(static_cast<size_t>(S));
      for (int t = 0; t < S; ++t) pos[static_cast<size_t>(t)] = t;
      const int32_t last = S - 1;
      model.forward_cached(ids.data(), pos.data(), 1, S, full[k], &last);
      std::copy_n(host_logits(model, 1, buf), Vp, rows.begin() + static_cast<long>(k * Vp));
    }
    const float* step_logits = nullptr;
    if (hi >= 0) {
      const size_t B = static_cast<size_t>(hi - lo + 1);
      ids.assign(B, 0);
      pos.assign(B, 0);
      for (size_t b = 0; b < B; ++b) {
        const size_t r = static_cast<size_t>(lo) + b;
        if (!live[r] || filled[r] >= S) continue;  // a dummy: position 0 of a row not read again
        ids[b] = context[r].back();
        pos[b] = filled[r];
      }
      model.forward_cached(ids.data(), pos.data(), static_cast<int>(B), 1, lo);
      step_logits = host_logits(model, B, buf);
    }
    // Rows choose in order, as the reference path's.
    size_t k = 0;
    for (int r = 0; r < R; ++r) {
      const size_t ru = static_cast<size_t>(r);
      if (!live[ru]) continue;
      if (filled[ru] >= S) {
        take(ru, rows.data() + (k++) * Vp);
      } else {
        ++filled[ru];
        take(ru, step_logits + static_cast<size_t>(r - lo) * Vp);
      }
    }
  }
  return out;
}

}  // namespace

std::vector<Generation> generate(Model& model, const std::vector<std::vector<int32_t>>& prompts,
                                 const GenerateOptions& o, const TokenCallback& on_token) {
  const ModelDims& d = model.dims();
  for (size_t r = 0; r < prompts.size(); ++r) {
    if (prompts[r].empty())
      throw Error(ExitCode::kUsage, "generate: prompt " + std::to_string(r) + " is empty");
    for (int32_t id : prompts[r])
      if (id < 0 || id >= d.vocab_size)
        throw Error(ExitCode::kUsage, "generate: prompt " + std::to_string(r) + " has token " +
                                          std::to_string(id) + ", outside the model's vocabulary of " +
                                          std::to_string(d.vocab_size));
  }
  if (o.rng != nullptr && prompts.size() != 1)
    throw Error(ExitCode::kInternal, "generate: GenerateOptions::rng is for one prompt");
  std::vector<Rng> rngs;
  for (size_t r = 0; r < prompts.size(); ++r) rngs.emplace_back(o.seed + r);
  if (o.rng != nullptr) rngs[0] = *o.rng;
  struct GiveBack {  // the caller's stream continues where generation left it
    const GenerateOptions& o;
    std::vector<Rng>& rngs;
    ~GiveBack() {
      if (o.rng != nullptr) *o.rng = rngs[0];
    }
  } give_back{o, rngs};
  if (prompts.empty() || o.max_tokens < 1) return std::vector<Generation>(prompts.size());
  if (o.use_cache && model.shard().tp == 1 && model.shard().pp == 1)
    return generate_cached(model, prompts, o, on_token, rngs);
  std::vector<Generation> out(prompts.size());
  std::vector<std::vector<int32_t>> context = prompts;
  std::vector<uint8_t> live(prompts.size(), 1);
  std::vector<float> buf;
  for (int i = 0; i < o.max_tokens; ++i) {
    bool any = false;
    for (size_t r = 0; r < prompts.size(); ++r) {
      if (!live[r]) continue;
      any = true;
      std::vector<int32_t>& ctx = context[r];
      const int T = static_cast<int>(std::min<size_t>(ctx.size(), static_cast<size_t>(d.max_seq_len)));
      model.forward(ctx.data() + (ctx.size() - static_cast<size_t>(T)), nullptr, 1, T);
      const float* logits = host_logits(model, static_cast<size_t>(T), buf) +
                            static_cast<size_t>(T - 1) * static_cast<size_t>(d.padded_vocab);
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
