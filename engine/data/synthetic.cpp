// Synthetic corpus: a word-level Markov chain over a random partition of the vocabulary.
//
// One non-obvious decision: the random component of the chain (probability kNoise) draws words
// from a Zipf popularity rather than uniformly. That makes the chain ergodic (so the stationary
// distribution and the entropy rate exist and power iteration converges at rate 1 - kNoise) and
// gives the token frequencies a skew a model picks up in its first few steps, so the loss falls
// visibly at once and then keeps falling as the model learns the transitions.
#include "engine/data/synthetic.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/data/loader.h"

namespace flotilla {

namespace {

constexpr int kSuccessors = 4;
constexpr double kSuccessorProb[kSuccessors] = {0.55, 0.25, 0.13, 0.07};
constexpr double kNoise = 0.1;  // probability of a popularity-drawn word instead of a successor
constexpr double kZipfExponent = 1.0;
constexpr double kZipfOffset = 2.7;  // z(r) ~ 1 / (r + offset)^exponent, r = 0, 1, ...
constexpr double kLengthProb[4] = {0.15, 0.35, 0.30, 0.20};  // word lengths 1..4

uint64_t derive(uint64_t seed, uint64_t tag) {
  uint64_t x = seed + 0x9E3779B97F4A7C15ull * (tag + 1);
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

struct Process {
  std::vector<std::vector<uint32_t>> words;  // word -> its tokens
  std::vector<double> popularity;            // z(w), sums to 1
  std::vector<double> popularity_cdf;        // inclusive prefix sums of z
  std::vector<int> successors;               // [w * k + j]
  int k = kSuccessors;                       // successors per word (fewer for tiny vocabularies)
  std::vector<double> successor_prob;        // renormalised kSuccessorProb[0..k)

  int num_words() const { return static_cast<int>(words.size()); }

  int draw_popular(Rng& rng) const {
    const double u = rng.uniform_double();
    const auto it = std::upper_bound(popularity_cdf.begin(), popularity_cdf.end(), u);
    return std::min(static_cast<int>(it - popularity_cdf.begin()), num_words() - 1);
  }

  int next_word(int w, Rng& rng) const {
    if (rng.uniform_double() < kNoise) return draw_popular(rng);
    double u = rng.uniform_double();
    for (int j = 0; j < k - 1; ++j) {
      if (u < successor_prob[static_cast<size_t>(j)]) return successors[static_cast<size_t>(w * k + j)];
      u -= successor_prob[static_cast<size_t>(j)];
    }
    return successors[static_cast<size_t>(w * k + k - 1)];
  }
};

Process build_process(int vocab_size, uint64_t seed) {
  if (vocab_size < 8 || vocab_size > (1 << 24))
    throw_usage("synthetic corpus: vocab size " + std::to_string(vocab_size) +
                " must be between 8 and 16,777,216");
  Rng rng(derive(seed, 0));
  std::vector<uint32_t> tokens(static_cast<size_t>(vocab_size));
  std::iota(tokens.begin(), tokens.end(), 0u);
  for (size_t i = tokens.size(); i > 1; --i) std::swap(tokens[i - 1], tokens[rng.below(i)]);

  Process p;
  for (size_t pos = 0; pos < tokens.size();) {
    double u = rng.uniform_double();
    size_t len = 4;
    for (size_t l = 0; l < 4; ++l) {
      if (u < kLengthProb[l]) {
        len = l + 1;
        break;
      }
      u -= kLengthProb[l];
    }
    len = std::min(len, tokens.size() - pos);
    p.words.emplace_back(tokens.begin() + static_cast<long>(pos),
                         tokens.begin() + static_cast<long>(pos + len));
    pos += len;
  }
  const int nw = p.num_words();
  p.popularity.resize(static_cast<size_t>(nw));
  for (int w = 0; w < nw; ++w)
    p.popularity[static_cast<size_t>(w)] = std::pow(w + kZipfOffset, -kZipfExponent);
  const double zsum = std::accumulate(p.popularity.begin(), p.popularity.end(), 0.0);
  for (double& z : p.popularity) z /= zsum;
  p.popularity_cdf.resize(p.popularity.size());
  std::partial_sum(p.popularity.begin(), p.popularity.end(), p.popularity_cdf.begin());

  p.k = std::min(kSuccessors, nw);
  double psum = 0;
  for (int j = 0; j < p.k; ++j) psum += kSuccessorProb[j];
  for (int j = 0; j < p.k; ++j) p.successor_prob.push_back(kSuccessorProb[j] / psum);
  p.successors.resize(static_cast<size_t>(nw * p.k));
  for (int w = 0; w < nw; ++w) {
    int* s = &p.successors[static_cast<size_t>(w * p.k)];
    for (int j = 0; j < p.k; ++j) {
      int cand;
      do {  // distinct successors, biased toward popular words; the rejection loop ends because k <= nw
        cand =
            rng.below(4) == 0 ? static_cast<int>(rng.below(static_cast<uint64_t>(nw))) : p.draw_popular(rng);
      } while (std::find(s, s + j, cand) != s + j);
      s[j] = cand;
    }
  }
  return p;
}

double xlogx(double x) { return x > 0 ? x * std::log(x) : 0.0; }

}  // namespace

SyntheticStats synthetic_stats(int vocab_size, uint64_t seed) {
  const Process p = build_process(vocab_size, seed);
  const int nw = p.num_words();
  const size_t n = static_cast<size_t>(nw);

  // Stationary distribution: pi' = kNoise * z + (1 - kNoise) * sum_w pi(w) P_succ(. | w).
  std::vector<double> pi(p.popularity), next(n);
  for (int iter = 0; iter < 2000; ++iter) {
    for (size_t v = 0; v < n; ++v) next[v] = kNoise * p.popularity[v];
    for (int w = 0; w < nw; ++w)
      for (int j = 0; j < p.k; ++j)
        next[static_cast<size_t>(p.successors[static_cast<size_t>(w * p.k + j)])] +=
            (1 - kNoise) * pi[static_cast<size_t>(w)] * p.successor_prob[static_cast<size_t>(j)];
    double diff = 0;
    for (size_t v = 0; v < n; ++v) diff += std::fabs(next[v] - pi[v]);
    pi.swap(next);
    if (diff < 1e-15) break;
  }

  // H(next word | w): the noise part is shared by all words; correct the k successor entries.
  double noise_entropy = 0;
  for (double z : p.popularity) noise_entropy -= xlogx(kNoise * z);
  double word_entropy = 0, mean_len = 0;
  for (int w = 0; w < nw; ++w) {
    double h = noise_entropy;
    for (int j = 0; j < p.k; ++j) {
      const double z = p.popularity[static_cast<size_t>(p.successors[static_cast<size_t>(w * p.k + j)])];
      h += xlogx(kNoise * z) - xlogx(kNoise * z + (1 - kNoise) * p.successor_prob[static_cast<size_t>(j)]);
    }
    word_entropy += pi[static_cast<size_t>(w)] * h;
    mean_len += pi[static_cast<size_t>(w)] * static_cast<double>(p.words[static_cast<size_t>(w)].size());
  }
  double unigram = 0;
  for (int w = 0; w < nw; ++w) {
    const double f = pi[static_cast<size_t>(w)] / mean_len;  // frequency of each token of word w
    unigram -= static_cast<double>(p.words[static_cast<size_t>(w)].size()) * xlogx(f);
  }
  SyntheticStats s;
  s.vocab_size = vocab_size;
  s.num_words = nw;
  s.mean_word_length = mean_len;
  s.entropy_rate = word_entropy / mean_len;
  s.unigram_entropy = unigram;
  s.uniform_entropy = std::log(static_cast<double>(vocab_size));
  return s;
}

double synthetic_entropy_bound(int vocab_size, uint64_t seed) {
  return synthetic_stats(vocab_size, seed).entropy_rate;
}

std::vector<uint32_t> synthetic_tokens(int vocab_size, int64_t n, uint64_t seed, int stream) {
  if (n < 0) throw_usage("synthetic corpus: token count " + std::to_string(n) + " is negative");
  const Process p = build_process(vocab_size, seed);
  Rng rng(derive(seed, 1 + static_cast<uint64_t>(stream)));
  std::vector<uint32_t> out;
  out.reserve(static_cast<size_t>(n) + 4);
  int w = p.draw_popular(rng);
  while (static_cast<int64_t>(out.size()) < n) {
    const auto& word = p.words[static_cast<size_t>(w)];
    out.insert(out.end(), word.begin(), word.end());
    w = p.next_word(w, rng);
  }
  out.resize(static_cast<size_t>(n));
  return out;
}

void write_synthetic_corpus(const std::string& dir, int vocab_size, int64_t train_tokens, int64_t val_tokens,
                            uint64_t seed) {
  if (train_tokens < 2)
    throw_usage("synthetic corpus: --tokens " + std::to_string(train_tokens) + " must be at least 2");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw_io("cannot create the corpus directory " + dir + ": " + ec.message());
  const auto dir_path = std::filesystem::path(dir);
  write_shard((dir_path / "train_000.bin").string(), synthetic_tokens(vocab_size, train_tokens, seed, 0));
  if (val_tokens > 0)
    write_shard((dir_path / "val_000.bin").string(), synthetic_tokens(vocab_size, val_tokens, seed, 1));
}

}  // namespace flotilla
