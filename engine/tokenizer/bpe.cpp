// BPE encoding and decoding.
//
// One non-obvious decision: a pre-token of a trained or GPT-2 tokenizer is merged by GPT-2's own algorithm
// (repeatedly take the lowest-ranked adjacent pair and merge all its non-overlapping occurrences left to
// right), which is quadratic in the piece length; pieces longer than kLongPiece bytes (long runs of letters
// or spaces) switch to an equivalent heap over a linked list. The two agree whenever every merge's rank is
// above the ranks of the merges that made its parts — true of every trained tokenizer and of GPT-2's
// merges.txt — and a test checks them against each other. A tokenizer.json always uses the tokenizers
// library's heap order (merge_hf), whatever its merges' ranks.
#include <functional>
#include <queue>

#include "engine/core/error.h"
#include "engine/tokenizer/bpe_impl.h"
#include "engine/tokenizer/pretokenize.h"
#include "engine/tokenizer/unicode_text.h"

namespace flotilla {

namespace {
constexpr size_t kLongPiece = 256;   // heap algorithm above this many bytes
constexpr size_t kCachedPiece = 64;  // cache results of pieces up to this many bytes
constexpr size_t kCacheEntries = 1 << 18;
constexpr uint32_t kNoRank = UINT32_MAX;
}  // namespace

Tokenizer::Tokenizer() : impl_(std::make_unique<Impl>()) {}
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;

int Tokenizer::vocab_size() const { return static_cast<int>(impl_->tokens.size()); }
uint32_t Tokenizer::eot_id() const {
  if (impl_->eot == UINT32_MAX)
    throw_data(
        "the tokenizer has no end-of-text token (<|endoftext|>, <|end_of_text|> or an eos_token in "
        "tokenizer_config.json); name one with eos_token in tokenizer_config.json");
  return impl_->eot;
}
std::optional<uint32_t> Tokenizer::bos_id() const { return impl_->hf ? impl_->hf->bos : std::nullopt; }
std::optional<uint32_t> Tokenizer::eos_id() const {
  if (impl_->hf) return impl_->hf->eos;
  return impl_->eot;
}
std::optional<uint32_t> Tokenizer::pad_id() const { return impl_->hf ? impl_->hf->pad : std::nullopt; }
bool Tokenizer::is_special(uint32_t id) const { return id < impl_->special.size() && impl_->special[id]; }
std::optional<uint32_t> Tokenizer::token_id(std::string_view content) const {
  const Impl& d = *impl_;
  if (d.hf)
    for (const HfAddedToken& a : d.hf->added)
      if (a.content == content) return a.id;
  for (const Special& s : d.specials)
    if (s.text == content) return s.id;
  std::string bytes;
  if (gpt2_text_to_bytes(content, &bytes)) {
    if (d.hf) {
      const auto it = d.hf->whole_tokens.find(bytes);
      if (it != d.hf->whole_tokens.end()) return it->second;
    } else {
      for (uint32_t id = 0; id < d.tokens.size(); ++id)
        if (!d.special[id] && d.tokens[id] == bytes) return id;
    }
  }
  return std::nullopt;
}
const std::vector<uint32_t>& Tokenizer::template_prefix() const {
  static const std::vector<uint32_t> kNone;
  return impl_->hf ? impl_->hf->prefix : kNone;
}
const std::vector<uint32_t>& Tokenizer::template_suffix() const {
  static const std::vector<uint32_t> kNone;
  return impl_->hf ? impl_->hf->suffix : kNone;
}
bool Tokenizer::has_normalizer() const { return impl_->hf && impl_->hf->nfc; }
std::string Tokenizer::normalize(std::string_view text) const {
  return has_normalizer() ? nfc(text) : std::string(text);
}
bool Tokenizer::can_cut_at_newlines() const { return !impl_->hf || impl_->hf->cut_safe; }
const std::string& Tokenizer::token_bytes(uint32_t id) const {
  if (id >= impl_->tokens.size())
    throw_data("token id " + std::to_string(id) + " is outside the tokenizer's vocabulary of " +
               std::to_string(impl_->tokens.size()));
  if (!impl_->defined.empty() && !impl_->defined[id])
    throw_data("token id " + std::to_string(id) + " has no token in the tokenizer (an unused id)");
  return impl_->tokens[id];
}
const std::vector<Tokenizer::Merge>& Tokenizer::merges() const { return impl_->merges; }
const std::vector<Tokenizer::Special>& Tokenizer::specials() const { return impl_->specials; }
const std::string& Tokenizer::origin() const { return impl_->origin; }

void Tokenizer::Impl::build_index(const std::string& source) {
  const std::string where = "tokenizer " + source + ": ";
  const size_t n = tokens.size();
  if (n < 256 || n > (size_t{1} << 31))
    throw_data(where + std::to_string(n) + " tokens is not a usable vocabulary");
  special.assign(n, 0);
  eot = UINT32_MAX;
  for (const Special& s : specials) {
    if (s.id >= n)
      throw_data(where + "special token '" + s.text + "' has id " + std::to_string(s.id) + " >= vocab size");
    if (special[s.id])
      throw_data(where + "id " + std::to_string(s.id) + " is listed as a special token twice");
    special[s.id] = 1;
    tokens[s.id] = s.text;
    if (s.text == kEndOfText) eot = s.id;
  }
  if (eot == UINT32_MAX)
    throw_data(where + "has no " + std::string(kEndOfText) + " token; add it to the vocabulary");
  std::array<bool, 256> seen{};
  for (uint32_t id = 0; id < n; ++id) {
    if (special[id] || tokens[id].size() != 1) continue;
    const uint8_t b = static_cast<uint8_t>(tokens[id][0]);
    if (seen[b])
      throw_data(where + "byte " + std::to_string(b) + " has two tokens (" + std::to_string(byte_id[b]) +
                 " and " + std::to_string(id) + ")");
    seen[b] = true;
    byte_id[b] = id;
  }
  for (int b = 0; b < 256; ++b)
    if (!seen[static_cast<size_t>(b)])
      throw_data(where + "byte " + std::to_string(b) +
                 " has no token: a byte-level vocabulary needs all 256");
  rank.clear();
  rank.reserve(merges.size() * 2);
  for (size_t r = 0; r < merges.size(); ++r) {
    const Merge& m = merges[r];
    const std::string rank_name = "merge " + std::to_string(r) + " (" + std::to_string(m.left) + " " +
                                  std::to_string(m.right) + " -> " + std::to_string(m.result) + ")";
    if (m.left >= n || m.right >= n || m.result >= n)
      throw_data(where + rank_name + " names an id >= vocab size");
    if (special[m.left] || special[m.right] || special[m.result])
      throw_data(where + rank_name + " involves a special token");
    if (tokens[m.result] != tokens[m.left] + tokens[m.right])
      throw_data(where + rank_name + ": the result's bytes are not the concatenation of its parts");
    if (!rank.emplace(pair_key(m.left, m.right), static_cast<uint32_t>(r)).second)
      throw_data(where + rank_name + " repeats an earlier merge of the same pair");
  }
  std::lock_guard<std::mutex> lock(cache_mutex);
  cache.clear();
}

void Tokenizer::Impl::merge_simple(std::vector<uint32_t>& syms) const {
  std::vector<uint32_t> next;
  while (syms.size() > 1) {
    uint32_t best = kNoRank;
    for (size_t i = 0; i + 1 < syms.size(); ++i) {
      const auto it = rank.find(pair_key(syms[i], syms[i + 1]));
      if (it != rank.end() && it->second < best) best = it->second;
    }
    if (best == kNoRank) break;
    const Merge& m = merges[best];
    next.clear();
    for (size_t i = 0; i < syms.size();) {
      if (i + 1 < syms.size() && syms[i] == m.left && syms[i + 1] == m.right) {
        next.push_back(m.result);
        i += 2;
      } else {
        next.push_back(syms[i]);
        ++i;
      }
    }
    syms.swap(next);
  }
}

void Tokenizer::Impl::merge_heap(std::vector<uint32_t>& syms) const {
  // Linked list over positions; a candidate is (rank, left position), popped lowest rank first
  // and, within a rank, leftmost first: the order the pass algorithm merges in.
  const int n = static_cast<int>(syms.size());
  std::vector<int> prev(static_cast<size_t>(n)), next(static_cast<size_t>(n));
  std::vector<uint8_t> alive(static_cast<size_t>(n), 1);
  for (int i = 0; i < n; ++i) {
    prev[static_cast<size_t>(i)] = i - 1;
    next[static_cast<size_t>(i)] = i + 1 < n ? i + 1 : -1;
  }
  using Candidate = std::pair<uint32_t, int>;
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto push = [&](int i) {
    if (i < 0) return;
    const int j = next[static_cast<size_t>(i)];
    if (j < 0) return;
    const auto it = rank.find(pair_key(syms[static_cast<size_t>(i)], syms[static_cast<size_t>(j)]));
    if (it != rank.end()) heap.emplace(it->second, i);
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const auto [r, i] = heap.top();
    heap.pop();
    const int j = next[static_cast<size_t>(i)];
    const Merge& m = merges[r];
    if (!alive[static_cast<size_t>(i)] || j < 0 || syms[static_cast<size_t>(i)] != m.left ||
        syms[static_cast<size_t>(j)] != m.right)
      continue;  // stale: one side was merged since this candidate was pushed
    syms[static_cast<size_t>(i)] = m.result;
    alive[static_cast<size_t>(j)] = 0;
    const int k = next[static_cast<size_t>(j)];
    next[static_cast<size_t>(i)] = k;
    if (k >= 0) prev[static_cast<size_t>(k)] = i;
    push(prev[static_cast<size_t>(i)]);
    push(i);
  }
  size_t w = 0;
  for (int i = 0; i < n; ++i)
    if (alive[static_cast<size_t>(i)]) syms[w++] = syms[static_cast<size_t>(i)];
  syms.resize(w);
}

void Tokenizer::Impl::encode_piece(std::string_view piece, std::vector<uint32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_id[static_cast<uint8_t>(piece[0])]);
    return;
  }
  const bool cacheable = piece.size() <= kCachedPiece;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex);
    const auto it = cache.find(std::string(piece));
    if (it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  if (hf && hf->ignore_merges) {  // the whole piece is a token: taken as is, no merging
    const auto it = hf->whole_tokens.find(std::string(piece));
    if (it != hf->whole_tokens.end()) {
      out.push_back(it->second);
      if (cacheable) {
        std::lock_guard<std::mutex> lock(cache_mutex);
        if (cache.size() >= kCacheEntries) cache.clear();
        cache.emplace(std::string(piece), std::vector<uint32_t>{it->second});
      }
      return;
    }
  }
  std::vector<uint32_t> syms(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) syms[i] = byte_id[static_cast<uint8_t>(piece[i])];
  if (hf)
    merge_hf(syms);
  else if (piece.size() > kLongPiece)
    merge_heap(syms);
  else
    merge_simple(syms);
  out.insert(out.end(), syms.begin(), syms.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex);
    if (cache.size() >= kCacheEntries) cache.clear();
    cache.emplace(std::string(piece), std::move(syms));
  }
}

std::vector<uint32_t> Tokenizer::encode_piece_for_test(std::string_view piece, bool long_algorithm) const {
  std::vector<uint32_t> syms(piece.size());
  for (size_t i = 0; i < piece.size(); ++i) syms[i] = impl_->byte_id[static_cast<uint8_t>(piece[i])];
  if (long_algorithm)
    impl_->merge_heap(syms);
  else
    impl_->merge_simple(syms);
  return syms;
}

void Tokenizer::encode_append(std::string_view text, std::vector<uint32_t>& out) const {
  encode_append(text, false, out, nullptr);
}

void Tokenizer::encode_append(std::string_view text, bool allow_special, std::vector<uint32_t>& out,
                              std::vector<uint32_t>* starts) const {
  if (impl_->hf) {
    impl_->encode_hf(text, allow_special, out, starts);
    return;
  }
  if (allow_special && !impl_->specials.empty()) {  // split at special tokens, then encode the text between
    size_t pos = 0;
    while (pos < text.size()) {
      size_t best = std::string_view::npos;
      const Special* hit = nullptr;
      for (const Special& s : impl_->specials) {
        const size_t at = text.find(s.text, pos);
        if (at < best || (at == best && hit && s.text.size() > hit->text.size())) {
          best = at;
          hit = &s;
        }
      }
      const size_t end = hit ? best : text.size();
      if (end > pos) {
        const size_t before = starts ? starts->size() : 0;
        encode_append(text.substr(pos, end - pos), false, out, starts);
        if (starts)  // offsets of the part -> offsets of the text
          for (size_t i = before; i < starts->size(); ++i) (*starts)[i] += static_cast<uint32_t>(pos);
      }
      if (!hit) break;
      out.push_back(hit->id);
      if (starts) starts->push_back(static_cast<uint32_t>(best));
      pos = best + hit->text.size();
    }
    return;
  }
  thread_local std::vector<std::string_view> pieces;
  pieces.clear();
  pretokenize(text, pieces);
  for (std::string_view p : pieces) {
    const size_t before = out.size();
    impl_->encode_piece(p, out);
    if (!starts) continue;
    uint32_t at = static_cast<uint32_t>(p.data() - text.data());
    for (size_t i = before; i < out.size(); ++i) {
      starts->push_back(at);
      at += static_cast<uint32_t>(impl_->tokens[out[i]].size());
    }
  }
}

std::vector<uint32_t> Tokenizer::encode_model_input(std::string_view text) const {
  std::vector<uint32_t> out = template_prefix();
  encode_append(text, true, out, nullptr);
  out.insert(out.end(), template_suffix().begin(), template_suffix().end());
  return out;
}

std::vector<uint32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<uint32_t> out;
  out.reserve(text.size() / 3 + 1);
  encode_append(text, allow_special, out, nullptr);
  return out;
}

std::string Tokenizer::decode(const std::vector<uint32_t>& ids) const {
  std::string out;
  for (uint32_t id : ids) out += token_bytes(id);
  return out;
}

}  // namespace flotilla
