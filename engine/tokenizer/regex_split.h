// The `Split` pre-tokenizer of Hugging Face tokenizer.json: an Oniguruma-syntax regex run by PCRE2,
// and the library's five ways of turning matches into pieces (behavior) with `invert`.
//
// One non-obvious decision: the pattern is *translated* before PCRE2 compiles it, because a few
// constructs mean different things in the two engines (measured against the `tokenizers` library,
// docs/data.md "Regex dialect"): Oniguruma's \s is 9-13, U+0085 and \p{Z} (PCRE2's UCP \s adds
// U+180E), its \w is \p{L}\p{M}\p{N}\p{Pc} (PCRE2's lacks marks and Pc), its \h is a hex digit (PCRE2:
// horizontal space), ^ and $ are line anchors, and `{n,m}+` is a repeated interval, not a possessive
// one. Those are rewritten into explicit classes; constructs with no faithful rewrite are refused
// with the JSON path, so a pattern never silently splits differently.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace flotilla {

// A run of bytes of the subject: a match of the pattern or the gap between two matches.
struct RegexSpan {
  uint32_t begin, end;
  bool match;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Parses "Removed", "Isolated", ... (tokenizers' serialised names); false when unknown.
bool parse_split_behavior(std::string_view name, SplitBehavior* out);

class SplitRegex {
 public:
  SplitRegex();
  ~SplitRegex();
  SplitRegex(SplitRegex&&) noexcept;
  SplitRegex& operator=(SplitRegex&&) noexcept;

  // Compiles an Oniguruma-syntax pattern (UTF-8, Unicode classes). `where` names the pattern in
  // errors (a JSON path); throws Error(kData) for a pattern PCRE2 rejects or that has no faithful
  // translation.
  static SplitRegex oniguruma(std::string_view pattern, const std::string& where);
  // A literal string pattern (tokenizers' {"String": ...}).
  static SplitRegex literal(std::string_view text, const std::string& where);

  // Covers `text` with ordered spans, matches and gaps, as tokenizers' find_matches does (an empty
  // text gives one empty gap). Bytes that are not valid UTF-8 never match. Throws Error(kData)
  // when PCRE2 gives up (match limit) on a pathological input.
  void find_matches(std::string_view text, std::vector<RegexSpan>& out) const;

  // The translated PCRE2 pattern (tests, messages).
  const std::string& pcre2_pattern() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Rewrites an Oniguruma pattern into PCRE2 syntax with the same meaning (see the purpose block);
// throws Error(kData) naming `where` for constructs it cannot rewrite.
std::string translate_oniguruma(std::string_view pattern, const std::string& where);

// Applies a behaviour to spans (flags inverted first when `invert`): appends the kept pieces as
// [begin, end) pairs, empty pieces dropped, exactly as tokenizers' NormalizedString::split.
void split_spans(const std::vector<RegexSpan>& spans, SplitBehavior behavior, bool invert,
                 std::vector<std::pair<uint32_t, uint32_t>>& pieces);

}  // namespace flotilla
