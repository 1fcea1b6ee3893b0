// BPE training: count pre-tokens, then repeatedly merge the most frequent adjacent pair.
//
// One non-obvious decision: pair counts live in a hash map and the "most frequent" query uses a
// max-heap with lazy invalidation (an entry is used only if its count still matches the map),
// and each merge revisits only the words that contain the pair, found through a pair -> words
// index. Ties are broken by the smaller (left, right) ids, so the result does not depend on hash
// iteration order: the same corpus always gives the same merges.
#include <algorithm>
#include <fstream>
#include <queue>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "engine/core/error.h"
#include "engine/tokenizer/bpe_impl.h"
#include "engine/tokenizer/pretokenize.h"

namespace flotilla {

namespace {

struct Word {
  std::vector<uint32_t> syms;
  int64_t count = 0;
};

struct HeapEntry {
  int64_t count;
  uint64_t key;
  bool operator<(const HeapEntry& o) const {  // max-heap: higher count, then smaller key
    if (count != o.count) return count < o.count;
    return key > o.key;
  }
};

}  // namespace

Tokenizer Tokenizer::train(const std::vector<std::string_view>& documents, int vocab_size) {
  if (vocab_size < 257)
    throw_usage("tokenizer train: --vocab-size " + std::to_string(vocab_size) +
                " is too small: 256 byte tokens + <|endoftext|> need at least 257");
  // 1. Distinct pre-tokens and their counts.
  std::unordered_map<std::string_view, int64_t> piece_counts;
  std::vector<std::string_view> pieces;
  for (std::string_view doc : documents) {
    pieces.clear();
    pretokenize(doc, pieces);
    for (std::string_view p : pieces) ++piece_counts[p];
  }
  // Sorted so word indices (and thus everything below) do not depend on hash order.
  std::vector<std::pair<std::string_view, int64_t>> sorted(piece_counts.begin(), piece_counts.end());
  std::sort(sorted.begin(), sorted.end());
  std::vector<Word> words;
  words.reserve(sorted.size());
  for (const auto& [piece, count] : sorted) {
    if (piece.size() < 2) continue;  // nothing to merge inside
    Word w;
    w.count = count;
    for (char c : piece) w.syms.push_back(static_cast<uint8_t>(c));
    words.push_back(std::move(w));
  }

  // 2. Pair counts and the pair -> words index.
  std::unordered_map<uint64_t, int64_t> pair_count;
  std::unordered_map<uint64_t, std::vector<uint32_t>> where;
  for (uint32_t wi = 0; wi < words.size(); ++wi) {
    const Word& w = words[wi];
    for (size_t i = 0; i + 1 < w.syms.size(); ++i) {
      const uint64_t k = pair_key(w.syms[i], w.syms[i + 1]);
      pair_count[k] += w.count;
      auto& list = where[k];
      if (list.empty() || list.back() != wi) list.push_back(wi);
    }
  }
  std::priority_queue<HeapEntry> heap;
  for (const auto& [k, c] : pair_count) heap.push({c, k});

  auto impl = std::make_unique<Impl>();
  impl->origin = "trained";
  for (int b = 0; b < 256; ++b) impl->tokens.emplace_back(1, static_cast<char>(b));
  const size_t target_merges = static_cast<size_t>(vocab_size) - 257;
  std::vector<uint32_t> visited(words.size(), UINT32_MAX);
  std::unordered_set<uint64_t> touched;
  std::vector<uint32_t> merged;

  // 3. Merge rounds.
  while (impl->merges.size() < target_merges && !heap.empty()) {
    const HeapEntry top = heap.top();
    heap.pop();
    const auto found = pair_count.find(top.key);
    if (found == pair_count.end() || found->second != top.count) continue;  // stale entry
    if (top.count < 2) break;  // only singletons left: merging them would just memorise
    const uint32_t left = static_cast<uint32_t>(top.key >> 32), right = static_cast<uint32_t>(top.key);
    const uint32_t result = static_cast<uint32_t>(impl->tokens.size());
    const uint32_t round = static_cast<uint32_t>(impl->merges.size());
    impl->merges.push_back({left, right, result});
    impl->tokens.push_back(impl->tokens[left] + impl->tokens[right]);
    touched.clear();
    const std::vector<uint32_t> holders = std::move(where[top.key]);
    where.erase(top.key);
    for (uint32_t wi : holders) {
      if (visited[wi] == round) continue;
      visited[wi] = round;
      Word& w = words[wi];
      // Remove this word's pairs, merge left to right, add its new pairs back.
      for (size_t i = 0; i + 1 < w.syms.size(); ++i) {
        const uint64_t k = pair_key(w.syms[i], w.syms[i + 1]);
        pair_count[k] -= w.count;
        touched.insert(k);
      }
      merged.clear();
      for (size_t i = 0; i < w.syms.size();) {
        if (i + 1 < w.syms.size() && w.syms[i] == left && w.syms[i + 1] == right) {
          merged.push_back(result);
          i += 2;
        } else {
          merged.push_back(w.syms[i++]);
        }
      }
      w.syms.swap(merged);
      for (size_t i = 0; i + 1 < w.syms.size(); ++i) {
        const uint64_t k = pair_key(w.syms[i], w.syms[i + 1]);
        pair_count[k] += w.count;
        touched.insert(k);
        auto& list = where[k];
        if (list.empty() || list.back() != wi) list.push_back(wi);
      }
    }
    for (uint64_t k : touched) {  // includes the merged pair, now at count 0
      const auto it = pair_count.find(k);
      if (it == pair_count.end()) continue;
      if (it->second <= 0) {
        pair_count.erase(it);
      } else {
        heap.push({it->second, k});
      }
    }
  }

  const uint32_t eot = static_cast<uint32_t>(impl->tokens.size());
  impl->tokens.emplace_back(kEndOfText);
  impl->specials.push_back({eot, kEndOfText});
  impl->build_index("(trained)");
  Tokenizer t;
  t.impl_ = std::move(impl);
  return t;
}

Tokenizer Tokenizer::train_files(const std::vector<std::string>& paths, int vocab_size) {
  if (paths.empty()) throw_usage("tokenizer train: give at least one --input file");
  std::vector<std::string> texts;
  texts.reserve(paths.size());
  for (const std::string& path : paths) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw_data("tokenizer train: cannot read " + path);
    std::ostringstream ss;
    ss << in.rdbuf();
    texts.push_back(ss.str());
  }
  std::vector<std::string_view> views(texts.begin(), texts.end());
  return train(views, vocab_size);
}

}  // namespace flotilla
