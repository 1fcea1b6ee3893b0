// Split pre-tokenizer: Oniguruma -> PCRE2 pattern translation, match iteration, split behaviours.
//
// One non-obvious decision: matching runs with PCRE2_MATCH_INVALID_UTF, so bytes that are not
// valid UTF-8 (which Hugging Face never sees: Python strings are always valid) simply never match
// and end up in gap pieces; any byte string still splits into pieces that concatenate back to it.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "engine/tokenizer/regex_split.h"

#include <pcre2.h>

#include <algorithm>

#include "engine/core/error.h"

namespace flotilla {

namespace {

// Oniguruma's \s (9-13, U+0085, Zs/Zl/Zp) and \w (letters, marks, numbers, connectors) as PCRE2
// class members; \h is a hex digit there.
constexpr const char* kSpaceMembers = "\\t-\\r\\x{85}\\p{Z}";
constexpr const char* kWordMembers = "\\p{L}\\p{M}\\p{N}\\p{Pc}";
constexpr const char* kHexMembers = "0-9a-fA-F";

[[noreturn]] void refuse(const std::string& where, std::string_view pattern, const std::string& what) {
  throw_data(where + ": the regex " + std::string(pattern) + " uses " + what +
             ", which PCRE2 cannot reproduce exactly; this tokenizer is not supported");
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// Length of an interval quantifier {n}, {n,}, {n,m} or {,m} starting at p[i] == '{', or 0.
size_t interval_length(std::string_view p, size_t i, bool* empty_min) {
  size_t j = i + 1;
  const size_t lo = j;
  while (j < p.size() && is_digit(p[j])) ++j;
  const bool has_lo = j > lo;
  *empty_min = false;
  if (j < p.size() && p[j] == '}') return has_lo ? j + 1 - i : 0;
  if (j >= p.size() || p[j] != ',') return 0;
  ++j;
  const size_t hi = j;
  while (j < p.size() && is_digit(p[j])) ++j;
  if (j >= p.size() || p[j] != '}') return 0;
  if (!has_lo && j == hi) return 0;  // "{,}" is literal text
  *empty_min = !has_lo;
  return j + 1 - i;
}

struct MatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  MatchState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (context && stack) pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
};

MatchState& match_state() {
  thread_local MatchState state;
  return state;
}

size_t char_length(std::string_view text, size_t pos) {
  const auto b = static_cast<uint8_t>(text[pos]);
  const size_t n = b < 0x80             ? 1
                   : (b & 0xE0) == 0xC0 ? 2
                   : (b & 0xF0) == 0xE0 ? 3
                   : (b & 0xF8) == 0xF0 ? 4
                                        : 1;
  return pos + n <= text.size() ? n : 1;
}

}  // namespace

bool parse_split_behavior(std::string_view name, SplitBehavior* out) {
  static constexpr std::pair<std::string_view, SplitBehavior> kNames[] = {
      {"Removed", SplitBehavior::kRemoved},
      {"Isolated", SplitBehavior::kIsolated},
      {"MergedWithPrevious", SplitBehavior::kMergedWithPrevious},
      {"MergedWithNext", SplitBehavior::kMergedWithNext},
      {"Contiguous", SplitBehavior::kContiguous}};
  for (const auto& [n, b] : kNames)
    if (n == name) {
      *out = b;
      return true;
    }
  return false;
}

std::string translate_oniguruma(std::string_view p, const std::string& where) {
  std::string out;
  out.reserve(p.size() * 2);
  bool in_class = false;
  size_t class_body = 0;  // index of the first character of the class body (after '[' and '^')
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      switch (e) {
        case 's':
          out += in_class ? std::string(kSpaceMembers) : "[" + std::string(kSpaceMembers) + "]";
          break;
        case 'w':
          out += in_class ? std::string(kWordMembers) : "[" + std::string(kWordMembers) + "]";
          break;
        case 'h':
          out += in_class ? std::string(kHexMembers) : "[" + std::string(kHexMembers) + "]";
          break;
        case 'S':
        case 'W':
        case 'H':
          if (in_class) refuse(where, p, std::string("\\") + e + " inside a character class");
          out += "[^" + std::string(e == 'S' ? kSpaceMembers : e == 'W' ? kWordMembers : kHexMembers) + "]";
          break;
        case 'b':
        case 'B':
          if (in_class) {
            out += "\\";
            out += e;
          } else {
            refuse(where, p, std::string("the word boundary \\") + e);
          }
          break;
        case 'u':
          if (i + 4 < p.size() && is_hex(p[i + 1]) && is_hex(p[i + 2]) && is_hex(p[i + 3]) &&
              is_hex(p[i + 4])) {
            out += "\\x{" + std::string(p.substr(i + 1, 4)) + "}";
            i += 4;
          } else {
            refuse(where, p, "\\u without four hex digits");
          }
          break;
        default:
          out += '\\';
          out += e;
      }
      continue;
    }
    if (in_class) {
      if (c == '[') {
        if (i + 1 < p.size() && p[i + 1] == ':') {  // POSIX class [:alpha:]: same in both
          const size_t close = p.find(":]", i + 2);
          if (close == std::string_view::npos) refuse(where, p, "an unterminated [: class");
          out += p.substr(i, close + 2 - i);
          i = close + 1;
          continue;
        }
        refuse(where, p, "a nested character class");
      }
      if (c == '&' && i + 1 < p.size() && p[i + 1] == '&') refuse(where, p, "class intersection (&&)");
      if (c == ']' && i > class_body) in_class = false;
      out += c;
      continue;
    }
    if (c == '[') {
      in_class = true;
      out += c;
      class_body = i + 1;
      if (class_body < p.size() && p[class_body] == '^') {
        out += '^';
        ++i;
        ++class_body;
      }
      continue;
    }
    if (c == '{') {
      bool empty_min = false;
      const size_t n = interval_length(p, i, &empty_min);
      if (n > 0) {
        if (i + n < p.size() && p[i + n] == '+')
          refuse(where, p, "an interval followed by '+' (Oniguruma repeats it; PCRE2 makes it possessive)");
        out += empty_min ? "{0" + std::string(p.substr(i + 1, n - 1)) : std::string(p.substr(i, n));
        i += n - 1;
        continue;
      }
    }
    if (c == '(' && i + 2 < p.size() && p[i + 1] == '?') {
      size_t j = i + 2;
      while (j < p.size() && ((p[j] >= 'a' && p[j] <= 'z') || (p[j] >= 'A' && p[j] <= 'Z') || p[j] == '-'))
        ++j;
      if (j > i + 2 && j < p.size() && (p[j] == ':' || p[j] == ')')) {
        for (size_t k = i + 2; k < j; ++k)
          if (p[k] != 'i' && p[k] != 'x' && p[k] != '-')
            refuse(where, p, "the inline option (?" + std::string(p.substr(i + 2, j - i - 2)) + ")");
      }
    }
    out += c;
  }
  return out;
}

struct SplitRegex::Impl {
  pcre2_code* code = nullptr;
  std::string pattern;
  ~Impl() { pcre2_code_free(code); }
};

SplitRegex::SplitRegex() = default;
SplitRegex::~SplitRegex() = default;
SplitRegex::SplitRegex(SplitRegex&&) noexcept = default;
SplitRegex& SplitRegex::operator=(SplitRegex&&) noexcept = default;

namespace {

pcre2_code* compile(const std::string& pattern, uint32_t options, const std::string& where,
                    std::string_view original) {
  pcre2_compile_context* cc = pcre2_compile_context_create(nullptr);
  pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                                   &error, &offset, cc);
  pcre2_compile_context_free(cc);
  if (!code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    throw_data(where + ": cannot compile the regex " + std::string(original) + " (" +
               reinterpret_cast<const char*>(message) + " at offset " + std::to_string(offset) +
               " of its PCRE2 form " + pattern + ")");
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter where JIT is absent
  return code;
}

}  // namespace

SplitRegex SplitRegex::oniguruma(std::string_view pattern, const std::string& where) {
  SplitRegex r;
  r.impl_ = std::make_unique<Impl>();
  r.impl_->pattern = translate_oniguruma(pattern, where);
  r.impl_->code = compile(r.impl_->pattern, PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_MULTILINE,
                          where, pattern);
  return r;
}

SplitRegex SplitRegex::literal(std::string_view text, const std::string& where) {
  SplitRegex r;
  r.impl_ = std::make_unique<Impl>();
  r.impl_->pattern = std::string(text);
  r.impl_->code = compile(r.impl_->pattern, PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | PCRE2_LITERAL, where, text);
  return r;
}

const std::string& SplitRegex::pcre2_pattern() const { return impl_->pattern; }

void SplitRegex::find_matches(std::string_view text, std::vector<RegexSpan>& out) const {
  if (text.empty()) {
    out.push_back({0, 0, false});
    return;
  }
  if (impl_->pattern.empty()) {  // tokenizers: an empty pattern matches nothing
    out.push_back({0, static_cast<uint32_t>(text.size()), false});
    return;
  }
  MatchState& st = match_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0, prev = 0;
  bool matched_before = false;
  size_t last_end = 0;
  while (pos <= text.size()) {
    const int rc = pcre2_match(impl_->code, subject, text.size(), pos, 0, st.data, st.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof message);
      throw_data("pre-tokenizer regex " + impl_->pattern + " failed at byte " + std::to_string(pos) +
                 " of a " + std::to_string(text.size()) +
                 "-byte text: " + reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    const size_t s = ov[0], e = ov[1];
    if (s == e && matched_before && s == last_end) {  // no empty match right after a match: step on
      if (s >= text.size()) break;
      pos = s + char_length(text, s);
      continue;
    }
    if (prev != s) out.push_back({static_cast<uint32_t>(prev), static_cast<uint32_t>(s), false});
    out.push_back({static_cast<uint32_t>(s), static_cast<uint32_t>(e), true});
    prev = last_end = e;
    matched_before = true;
    pos = e > s ? e : (s < text.size() ? s + char_length(text, s) : text.size() + 1);
  }
  if (prev != text.size())
    out.push_back({static_cast<uint32_t>(prev), static_cast<uint32_t>(text.size()), false});
}

void split_spans(const std::vector<RegexSpan>& spans, SplitBehavior behavior, bool invert,
                 std::vector<std::pair<uint32_t, uint32_t>>& pieces) {
  // (begin, end, remove) as tokenizers computes them, then the empty pieces are dropped.
  struct Cut {
    uint32_t begin, end;
    bool remove;
  };
  std::vector<Cut> cuts;
  cuts.reserve(spans.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const RegexSpan& s : spans) cuts.push_back({s.begin, s.end, false});
      break;
    case SplitBehavior::kRemoved:
      for (const RegexSpan& s : spans) cuts.push_back({s.begin, s.end, s.match != invert});
      break;
    case SplitBehavior::kContiguous:
      for (const RegexSpan& s : spans) {
        const bool m = s.match != invert;
        if (m == previous_match && !cuts.empty())
          cuts.back().end = s.end;
        else
          cuts.push_back({s.begin, s.end, false});
        previous_match = m;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const RegexSpan& s : spans) {
        const bool m = s.match != invert;
        if (m && !previous_match && !cuts.empty())
          cuts.back().end = s.end;
        else
          cuts.push_back({s.begin, s.end, false});
        previous_match = m;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (size_t k = spans.size(); k-- > 0;) {
        const RegexSpan& s = spans[k];
        const bool m = s.match != invert;
        if (m && !previous_match && !cuts.empty())
          cuts.back().begin = s.begin;
        else
          cuts.push_back({s.begin, s.end, false});
        previous_match = m;
      }
      std::reverse(cuts.begin(), cuts.end());
      break;
  }
  for (const Cut& c : cuts)
    if (!c.remove && c.end > c.begin) pieces.emplace_back(c.begin, c.end);
}

}  // namespace flotilla
