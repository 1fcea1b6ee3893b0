// Synthetic corpus: byte-identical output for the same seed, different for another seed, fast,
// every token used, and its exact entropy rate confirmed by the empirical conditional (bigram)
// entropy of a 2M-token sample, well below ln(vocab) — the figure trainer tests use to justify
// their loss thresholds.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <unordered_map>

#include "check.h"
#include "engine/data/loader.h"
#include "engine/data/synthetic.h"
#include "test_data_util.h"

using namespace flotilla;

// Empirical H(X_{t+1} | X_t) and H(X_t) in nats.
static void empirical_entropies(const std::vector<uint32_t>& t, int vocab, double* conditional,
                                double* unigram) {
  std::unordered_map<uint64_t, double> pairs;
  std::vector<double> first(static_cast<size_t>(vocab), 0.0);
  for (size_t i = 0; i + 1 < t.size(); ++i) {
    pairs[static_cast<uint64_t>(t[i]) * static_cast<uint64_t>(vocab) + t[i + 1]] += 1;
    first[t[i]] += 1;
  }
  const double n = static_cast<double>(t.size() - 1);
  double h = 0, u = 0;
  for (const auto& [key, c] : pairs) h -= c / n * std::log(c / first[key / static_cast<uint64_t>(vocab)]);
  for (double c : first)
    if (c > 0) u -= c / n * std::log(c / n);
  *conditional = h;
  *unigram = u;
}

int main() {
  const std::string dir = data_test::scratch("data_synthetic");

  // Determinism: same arguments -> byte-identical shards; another seed -> different tokens.
  const auto t0 = std::chrono::steady_clock::now();
  write_synthetic_corpus(dir + "/a", 512, 2000000, 200000, 1337);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  write_synthetic_corpus(dir + "/b", 512, 2000000, 200000, 1337);
  write_synthetic_corpus(dir + "/c", 512, 2000000, 200000, 1338);
  const std::string a = data_test::read_bytes(dir + "/a/train_000.bin");
  CHECK(a.size() == 1024 + 2 * 2000000);
  CHECK(a == data_test::read_bytes(dir + "/b/train_000.bin"));
  CHECK(data_test::read_bytes(dir + "/a/val_000.bin") == data_test::read_bytes(dir + "/b/val_000.bin"));
  CHECK(a != data_test::read_bytes(dir + "/c/train_000.bin"));
  CHECK(inspect_shard(dir + "/a/val_000.bin", 512, true).num_tokens == 200000);
  // 2M tokens + 200k written durably: "well under a second" (generous bound for a loaded CI box).
  CHECK_MSG(secs < 2.0, "writing the corpus took %.2f s", secs);

  // Train and val are different samples of the same process.
  const auto train = synthetic_tokens(512, 2000000, 1337, 0);
  const auto val = synthetic_tokens(512, 200000, 1337, 1);
  CHECK(!std::equal(val.begin(), val.begin() + 1000, train.begin()));
  bool same_as_file = true;
  for (size_t i = 0; i < 1000; ++i)
    same_as_file = same_as_file && static_cast<uint16_t>(train[i]) ==
                                       *reinterpret_cast<const uint16_t*>(a.data() + 1024 + 2 * i);
  CHECK(same_as_file);

  // Every token id is used and in range.
  std::vector<int> seen(512, 0);
  for (uint32_t t : train) seen[t < 512 ? t : 0] += t < 512 ? 1 : -1000000;
  CHECK(*std::min_element(seen.begin(), seen.end()) > 0);

  // The exact entropy rate matches the empirical conditional entropy (plug-in estimate, biased
  // slightly low), and sits far below ln(V): a model can learn a lot.
  for (int vocab : {512, 1024}) {
    const SyntheticStats s = synthetic_stats(vocab, 1337);
    const auto tokens = vocab == 512 ? train : synthetic_tokens(vocab, 2000000, 1337, 0);
    double h_cond = 0, h_uni = 0;
    empirical_entropies(tokens, vocab, &h_cond, &h_uni);
    CHECK_NEAR(s.uniform_entropy, std::log(static_cast<double>(vocab)), 1e-12);
    CHECK_NEAR(h_cond, s.entropy_rate, 0.03);
    CHECK_NEAR(h_uni, s.unigram_entropy, 0.02);
    CHECK(s.entropy_rate < 0.25 * s.uniform_entropy);
    CHECK(s.unigram_entropy < s.uniform_entropy - 0.5);  // token frequencies alone lower the loss visibly
    CHECK(s.entropy_rate < s.unigram_entropy - 3.0);     // and the transitions much more
    CHECK(synthetic_entropy_bound(vocab, 1337) == s.entropy_rate);
    std::printf("vocab %d: ln V %.4f, unigram %.4f (empirical %.4f), entropy rate %.4f (empirical %.4f)\n",
                vocab, s.uniform_entropy, s.unigram_entropy, h_uni, s.entropy_rate, h_cond);
  }
  CHECK(synthetic_stats(512, 1).entropy_rate != synthetic_stats(512, 2).entropy_rate);
  CHECK_THROWS(synthetic_stats(4, 1), "vocab size 4");

  std::filesystem::remove_all(dir);
  return flotilla_test::summary("data_synthetic");
}
