// Log-likelihood scoring (see score.h).
#include "engine/infer/score.h"

#include <algorithm>
#include <cmath>

#include "engine/core/error.h"

namespace flotilla::infer {

double TokenScores::sum() const {
  double s = 0;
  for (double v : logprob) s += v;
  return s;
}

bool TokenScores::all_greedy() const {
  return std::all_of(greedy.begin(), greedy.end(), [](uint8_t g) { return g != 0; });
}

std::vector<TokenScores> score(Model& model, const std::vector<ScoreRequest>& requests, int max_batch) {
  const ModelDims& d = model.dims();
  if (max_batch < 1) throw Error(ExitCode::kUsage, "score: max_batch must be at least 1");
  for (size_t r = 0; r < requests.size(); ++r) {
    const ScoreRequest& q = requests[r];
    const std::string which = "score request " + std::to_string(r);
    if (q.ids.size() < 2 || q.ids.size() > static_cast<size_t>(d.max_seq_len) + 1)
      throw Error(ExitCode::kUsage, which + ": " + std::to_string(q.ids.size()) + " tokens; it takes 2 to " +
                                        std::to_string(d.max_seq_len + 1) + " (the model's context + 1)");
    if (q.first < 1 || q.first >= q.ids.size())
      throw Error(ExitCode::kUsage, which + ": the first scored token must be in 1.." + std::to_string(q.ids.size() - 1));
    for (int32_t id : q.ids)
      if (id < 0 || id >= d.vocab_size)
        throw Error(ExitCode::kUsage, which + ": token " + std::to_string(id) + " is outside the model's vocabulary of " +
                                          std::to_string(d.vocab_size));
  }
  std::vector<TokenScores> out(requests.size());
  const size_t V = static_cast<size_t>(d.vocab_size), Vp = static_cast<size_t>(d.padded_vocab);
  for (size_t b0 = 0; b0 < requests.size(); b0 += static_cast<size_t>(max_batch)) {
    const size_t B = std::min(requests.size() - b0, static_cast<size_t>(max_batch));
    size_t T = 0;
    for (size_t b = 0; b < B; ++b) T = std::max(T, requests[b0 + b].ids.size() - 1);
    std::vector<int32_t> inputs(B * T, 0);
    for (size_t b = 0; b < B; ++b) {
      const auto& ids = requests[b0 + b].ids;
      std::copy(ids.begin(), ids.end() - 1, inputs.begin() + static_cast<std::ptrdiff_t>(b * T));
    }
    model.forward(inputs.data(), nullptr, static_cast<int>(B), static_cast<int>(T));
    const float* logits = model.logits();
    for (size_t b = 0; b < B; ++b) {
      const ScoreRequest& q = requests[b0 + b];
      TokenScores& s = out[b0 + b];
      for (size_t i = q.first; i < q.ids.size(); ++i) {
        const float* row = logits + (b * T + (i - 1)) * Vp;
        const size_t best = static_cast<size_t>(std::max_element(row, row + V) - row);
        double maxv = row[best], sum = 0;
        for (size_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - maxv);
        const auto target = static_cast<size_t>(q.ids[i]);
        s.logprob.push_back(static_cast<double>(row[target]) - maxv - std::log(sum));
        s.greedy.push_back(best == target ? 1 : 0);
      }
    }
  }
  return out;
}

}  // namespace flotilla::infer
