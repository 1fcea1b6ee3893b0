// GPT-2 pre-tokenizer: the pattern's alternatives as a hand-written scanner over UTF-8.
//
// One non-obvious decision: the regex's backtracking case, \s+(?!\S), is done by remembering
// where the last whitespace character of a run starts: when a non-space follows a run of two or
// more characters, the piece ends there, so that last character can prefix the next word (" the").
// Classes come from unicode_classes.cpp.
#include "engine/tokenizer/pretokenize.h"

namespace flotilla {

int decode_utf8(std::string_view text, size_t pos, uint32_t* cp) {
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(text[i]); };
  const uint8_t b0 = byte(pos);
  *cp = 0xFFFFFFFFu;
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  int len;
  uint32_t value, min;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, value = b0 & 0x1Fu, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, value = b0 & 0x0Fu, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, value = b0 & 0x07u, min = 0x10000;
  } else {
    return 1;
  }
  if (pos + static_cast<size_t>(len) > text.size()) return 1;
  for (int i = 1; i < len; ++i) {
    const uint8_t b = byte(pos + static_cast<size_t>(i));
    if ((b & 0xC0) != 0x80) return 1;
    value = (value << 6) | (b & 0x3Fu);
  }
  if (value < min || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) return 1;
  *cp = value;
  return len;
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

namespace {

struct Char {
  CharClass cls;
  int len;
};

Char char_at(std::string_view text, size_t pos) {
  uint32_t cp;
  const int len = decode_utf8(text, pos, &cp);
  return {classify_code_point(cp), len};
}

// End of the run of characters of class cls starting at pos.
size_t run_end(std::string_view text, size_t pos, CharClass cls) {
  while (pos < text.size()) {
    const Char c = char_at(text, pos);
    if (c.cls != cls) break;
    pos += static_cast<size_t>(c.len);
  }
  return pos;
}

// Length of a contraction ('s 't 're 've 'm 'll 'd) at pos, or 0.
size_t contraction(std::string_view text, size_t pos) {
  if (text[pos] != '\'' || pos + 1 >= text.size()) return 0;
  const char a = text[pos + 1];
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (pos + 2 >= text.size()) return 0;
  const char b = text[pos + 2];
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

}  // namespace

void pretokenize(std::string_view text, std::vector<std::string_view>& out) {
  size_t pos = 0;
  const size_t n = text.size();
  while (pos < n) {
    // 's|'t|'re|'ve|'m|'ll|'d
    if (const size_t c = contraction(text, pos)) {
      out.push_back(text.substr(pos, c));
      pos += c;
      continue;
    }
    // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+': an optional U+0020, then a run of one class.
    size_t start = pos + (text[pos] == ' ' && pos + 1 < n ? 1 : 0);
    Char c = char_at(text, start);
    if (c.cls == CharClass::kSpace && start != pos) {  // " " then whitespace: the space alone won't do
      start = pos;
      c = char_at(text, pos);
    }
    if (c.cls != CharClass::kSpace) {
      const size_t end = run_end(text, start, c.cls);
      out.push_back(text.substr(pos, end - pos));
      pos = end;
      continue;
    }
    // '\s+(?!\S)' then '\s+': a whitespace run; if a non-space follows, leave its last character
    // to start the next piece (as " word"), unless the run is a single character.
    size_t end = pos, last = pos;
    while (end < n) {
      const Char w = char_at(text, end);
      if (w.cls != CharClass::kSpace) break;
      last = end;
      end += static_cast<size_t>(w.len);
    }
    if (end < n && last > pos) end = last;
    out.push_back(text.substr(pos, end - pos));
    pos = end;
  }
}

}  // namespace flotilla
