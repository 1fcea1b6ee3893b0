// Deterministic synthetic corpus with learnable structure and an exactly known entropy.
//
// The vocabulary is partitioned into "words" of 1-4 tokens (every token belongs to exactly one
// word, at one position). Text is a Markov chain over words: after word w comes one of 4 fixed
// successors with probabilities 0.55/0.25/0.13/0.07, or (with probability 0.1) any word drawn by a
// Zipf popularity. Because a single token identifies its word and position, the next token is
// certain inside a word and the chain's entropy is paid only at word ends, so the best achievable
// loss (the entropy rate, nats/token) is computed exactly: sum_w pi(w) H(next | w) / sum_w pi(w) len(w),
// with pi the chain's stationary distribution. A bigram model already reaches it; a unigram model
// reaches `unigram_entropy`. docs/data.md lists the figures for common vocab sizes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace flotilla {

struct SyntheticStats {
  int vocab_size = 0;
  int num_words = 0;
  double mean_word_length = 0;  // stationary, tokens per word
  double entropy_rate = 0;      // nats/token: the lowest expected loss any model can reach
  double unigram_entropy = 0;   // nats/token: the loss of a model that only learns token frequencies
  double uniform_entropy = 0;   // ln(vocab_size): the loss of an untrained model
};

// Statistics of the corpus process for this vocab and seed (exact up to float64 rounding).
SyntheticStats synthetic_stats(int vocab_size, uint64_t seed);
// Shorthand for synthetic_stats(...).entropy_rate: a lower bound on any model's expected loss.
double synthetic_entropy_bound(int vocab_size, uint64_t seed);

// n tokens of stream `stream` (0 = train, 1 = val; independent samples of the same process).
std::vector<uint32_t> synthetic_tokens(int vocab_size, int64_t n, uint64_t seed, int stream);

// Writes dir/train_000.bin (train_tokens) and dir/val_000.bin (val_tokens, skipped when 0),
// creating dir. Deterministic: the same arguments give byte-identical files.
void write_synthetic_corpus(const std::string& dir, int vocab_size, int64_t train_tokens, int64_t val_tokens,
                            uint64_t seed);

}  // namespace flotilla
