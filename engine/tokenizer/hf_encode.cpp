// Encoding with a tokenizer.json, stage by stage as the tokenizers library runs it: added tokens
// on the raw text, the normalizer on what is left, added tokens again on the normalized text,
// the pre-tokenizer steps, then BPE per piece (merge order of the library's Word::merge_all).
//
// One non-obvious decision: pieces are views into the text (or into the normalized copy of one
// segment) plus a byte offset, so a 10 MB text is split without copying; only ByteLevel's
// add_prefix_space, which inserts a byte that is not in the input, copies a piece, and its
// offsets map the inserted space to the piece's first byte (as the library's alignments do).
#include <deque>
#include <functional>
#include <queue>

#include "engine/core/error.h"
#include "engine/tokenizer/bpe_impl.h"
#include "engine/tokenizer/pretokenize.h"
#include "engine/tokenizer/unicode_text.h"

namespace flotilla {

namespace {

struct Segment {
  uint32_t begin, end;
  int64_t added;  // index into HfPipeline::added, or -1 for text
};

bool word_before(std::string_view s, size_t pos) {
  const int64_t cp = code_point_before(s, pos);
  return cp >= 0 && is_rust_word_char(static_cast<uint32_t>(cp));
}

bool word_at(std::string_view s, size_t pos) {
  const int64_t cp = code_point_at(s, pos);
  return cp >= 0 && is_rust_word_char(static_cast<uint32_t>(cp));
}

// Start of the white-space run that ends at `end` (Rust's \s*$ on s[..end]).
size_t white_space_run_start(std::string_view s, size_t end) {
  while (end > 0) {
    const int64_t cp = code_point_before(s, end);
    if (cp < 0 || !is_unicode_white_space(static_cast<uint32_t>(cp))) break;
    std::string enc;
    append_utf8(static_cast<uint32_t>(cp), enc);
    end -= enc.size();
  }
  return end;
}

// End of the white-space run that starts at `begin` (Rust's ^\s* on s[begin..]).
size_t white_space_run_end(std::string_view s, size_t begin) {
  while (begin < s.size()) {
    const int64_t cp = code_point_at(s, begin);
    if (cp < 0 || !is_unicode_white_space(static_cast<uint32_t>(cp))) break;
    uint32_t tmp;
    begin += static_cast<size_t>(decode_utf8(s, begin, &tmp));
  }
  return begin;
}

// tokenizers' AddedVocabulary::find_matches: leftmost-longest matches of one set, filtered by
// single_word, widened by lstrip / rstrip; the rest of the text as text segments.
void split_added(const HfPipeline& p, const HfAddedSet& set, std::string_view s, bool allow_special,
                 std::vector<Segment>& out) {
  if (set.empty || s.empty()) {
    out.push_back({0, static_cast<uint32_t>(s.size()), -1});
    return;
  }
  size_t start_offset = 0, pos = 0;
  while (pos < s.size()) {
    int64_t hit = -1;
    size_t at = pos;
    for (; at < s.size(); ++at) {
      const auto& bucket = set.by_first_byte[static_cast<uint8_t>(s[at])];
      for (uint32_t i : bucket) {
        const std::string& pat = p.added[i].pattern;
        if (s.compare(at, pat.size(), pat) == 0) {
          hit = i;
          break;
        }
      }
      if (hit >= 0) break;
    }
    if (hit < 0) break;
    const HfAddedToken& tok = p.added[static_cast<size_t>(hit)];
    size_t start = at, stop = at + tok.pattern.size();
    pos = stop;
    if (tok.special && !allow_special) continue;
    if (tok.single_word && ((start > 0 && word_before(s, start)) || (stop < s.size() && word_at(s, stop))))
      continue;
    if (tok.lstrip) start = std::max(white_space_run_start(s, start), start_offset);
    if (tok.rstrip) stop = white_space_run_end(s, stop);
    if (start_offset < start)
      out.push_back({static_cast<uint32_t>(start_offset), static_cast<uint32_t>(start), -1});
    out.push_back({static_cast<uint32_t>(start), static_cast<uint32_t>(stop), hit});
    start_offset = stop;
  }
  if (start_offset != s.size())
    out.push_back({static_cast<uint32_t>(start_offset), static_cast<uint32_t>(s.size()), -1});
}

struct Piece {
  std::string_view text;
  uint32_t offset;  // output offset of the piece's first real byte
  uint32_t shift;   // 1 when text starts with an inserted prefix space
  uint32_t map(size_t k) const { return offset + static_cast<uint32_t>(k >= shift ? k - shift : 0); }
};

}  // namespace

void Tokenizer::Impl::merge_hf(std::vector<uint32_t>& syms) const {
  const int n = static_cast<int>(syms.size());
  if (n < 2) return;
  std::vector<int> prev(static_cast<size_t>(n)), next(static_cast<size_t>(n));
  std::vector<uint8_t> alive(static_cast<size_t>(n), 1);
  for (int i = 0; i < n; ++i) {
    prev[static_cast<size_t>(i)] = i - 1;
    next[static_cast<size_t>(i)] = i + 1 < n ? i + 1 : -1;
  }
  struct Entry {
    uint32_t rank;
    int pos;
    uint32_t result;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto push = [&](int i) {
    if (i < 0) return;
    const int j = next[static_cast<size_t>(i)];
    if (j < 0) return;
    const auto it = rank.find(pair_key(syms[static_cast<size_t>(i)], syms[static_cast<size_t>(j)]));
    if (it != rank.end()) heap.push({it->second, i, merges[it->second].result});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Entry top = heap.top();
    heap.pop();
    const auto i = static_cast<size_t>(top.pos);
    if (!alive[i] || next[i] < 0) continue;
    const auto j = static_cast<size_t>(next[i]);
    const auto it = rank.find(pair_key(syms[i], syms[j]));
    if (it == rank.end() || merges[it->second].result != top.result) continue;  // stale entry
    syms[i] = top.result;
    alive[j] = 0;
    next[i] = next[j];
    if (next[j] >= 0) prev[static_cast<size_t>(next[j])] = top.pos;
    push(prev[i]);
    push(top.pos);
  }
  size_t w = 0;
  for (int i = 0; i < n; ++i)
    if (alive[static_cast<size_t>(i)]) syms[w++] = syms[static_cast<size_t>(i)];
  syms.resize(w);
}

void Tokenizer::Impl::encode_hf(std::string_view text, bool allow_special, std::vector<uint32_t>& ids,
                                std::vector<uint32_t>* starts) const {
  const HfPipeline& p = *hf;
  std::vector<Segment> raw, normed;
  std::vector<Piece> pieces, next;
  std::vector<RegexSpan> spans;
  std::vector<std::pair<uint32_t, uint32_t>> cuts;
  std::deque<std::string> arena;  // prefixed copies (add_prefix_space)
  std::vector<uint32_t> piece_ids;

  auto emit_text = [&](std::string_view s, uint32_t base) {
    pieces.clear();
    pieces.push_back({s, base, 0});
    for (const HfPreStep& step : p.steps) {
      next.clear();
      for (const Piece& pc : pieces) {
        std::string_view t = pc.text;
        Piece cur = pc;
        if (step.kind == HfPreStep::Kind::kByteLevel) {
          if (step.add_prefix_space && t[0] != ' ') {
            std::string& copy = arena.emplace_back(1, ' ');
            copy.append(t);
            cur = {copy, pc.offset, 1};
            t = cur.text;
          }
          if (!step.use_regex) {
            next.push_back(cur);
            continue;
          }
        }
        spans.clear();
        cuts.clear();
        step.regex.find_matches(t, spans);
        split_spans(spans,
                    step.kind == HfPreStep::Kind::kByteLevel ? SplitBehavior::kIsolated : step.behavior,
                    step.invert, cuts);
        for (const auto& [b, e] : cuts)
          next.push_back({t.substr(b, e - b), cur.map(b), b == 0 ? cur.shift : 0u});
      }
      pieces.swap(next);
    }
    for (const Piece& pc : pieces) {
      const size_t before = ids.size();
      encode_piece(pc.text, ids);
      if (!starts) continue;
      size_t k = 0;
      for (size_t t = before; t < ids.size(); ++t) {
        starts->push_back(pc.map(k));
        k += tokens[ids[t]].size();
      }
    }
  };

  raw.clear();
  split_added(p, p.raw_set, text, allow_special, raw);
  uint32_t base = 0;
  for (const Segment& seg : raw) {
    const std::string_view part = text.substr(seg.begin, seg.end - seg.begin);
    if (seg.added >= 0) {
      ids.push_back(p.added[static_cast<size_t>(seg.added)].id);
      if (starts) starts->push_back(base);
      base += static_cast<uint32_t>(part.size());
      continue;
    }
    const std::string normalized = p.nfc ? nfc(part) : std::string();
    const std::string_view s = p.nfc ? std::string_view(normalized) : part;
    normed.clear();
    split_added(p, p.normalized_set, s, allow_special, normed);
    for (const Segment& inner : normed) {
      if (inner.added >= 0) {
        ids.push_back(p.added[static_cast<size_t>(inner.added)].id);
        if (starts) starts->push_back(base + inner.begin);
      } else if (inner.end > inner.begin) {
        emit_text(s.substr(inner.begin, inner.end - inner.begin), base + inner.begin);
      }
    }
    base += static_cast<uint32_t>(s.size());
  }
}

}  // namespace flotilla
