// Unicode helpers: NFC through utf8proc over valid UTF-8 runs, and character-class predicates.
//
// One non-obvious decision: Rust's \w needs the Alphabetic property, which utf8proc does not
// expose; it is rebuilt from categories (letters, Nl, marks) plus the circled and squared Latin
// letters (So with Other_Alphabetic), which is exact for every assigned code point in the Unicode
// versions utf8proc and the tokenizers library ship.
#include "engine/tokenizer/unicode_text.h"

#include <utf8proc.h>

#include <cstdlib>

#include "engine/tokenizer/pretokenize.h"

namespace flotilla {

namespace {

void append_nfc(std::string_view run, std::string& out) {
  bool ascii = true;
  for (char c : run)
    if (static_cast<unsigned char>(c) >= 0x80) {
      ascii = false;
      break;
    }
  if (ascii) {  // ASCII alone never changes under NFC
    out += run;
    return;
  }
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(run.data()),
                                          static_cast<utf8proc_ssize_t>(run.size()), &mapped,
                                          static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  if (n < 0) {  // cannot happen for the valid runs given here; keep the text rather than lose it
    out += run;
    return;
  }
  out.append(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
  std::free(mapped);
}

}  // namespace

std::string nfc(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t run = 0, pos = 0;
  while (pos < text.size()) {
    uint32_t cp;
    const int len = decode_utf8(text, pos, &cp);
    if (cp == 0xFFFFFFFFu) {  // invalid byte: normalize the run before it, keep the byte
      append_nfc(text.substr(run, pos - run), out);
      out += text[pos];
      run = pos + 1;
    }
    pos += static_cast<size_t>(len);
  }
  append_nfc(text.substr(run), out);
  return out;
}

bool is_unicode_white_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
         cp == 0x3000;
}

bool is_rust_word_char(uint32_t cp) {
  if (cp == 0x200C || cp == 0x200D) return true;
  if ((cp >= 0x24B6 && cp <= 0x24E9) || (cp >= 0x1F130 && cp <= 0x1F149) ||
      (cp >= 0x1F150 && cp <= 0x1F169) || (cp >= 0x1F170 && cp <= 0x1F189))
    return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

bool is_python_space(uint32_t cp) {
  const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(cp));
  return p->category == UTF8PROC_CATEGORY_ZS || p->bidi_class == UTF8PROC_BIDI_CLASS_WS ||
         p->bidi_class == UTF8PROC_BIDI_CLASS_B || p->bidi_class == UTF8PROC_BIDI_CLASS_S;
}

int64_t code_point_at(std::string_view text, size_t begin) {
  if (begin >= text.size()) return -1;
  uint32_t cp;
  decode_utf8(text, begin, &cp);
  return cp == 0xFFFFFFFFu ? -1 : static_cast<int64_t>(cp);
}

int64_t code_point_before(std::string_view text, size_t end) {
  if (end == 0 || end > text.size()) return -1;
  size_t start = end - 1;
  while (start > 0 && end - start < 4 && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
  uint32_t cp;
  const int len = decode_utf8(text, start, &cp);
  if (cp == 0xFFFFFFFFu || start + static_cast<size_t>(len) != end) return -1;
  return cp;
}

std::string_view python_strip(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e) {
    const int64_t cp = code_point_at(s, b);
    if (cp < 0 || !is_python_space(static_cast<uint32_t>(cp))) break;
    uint32_t tmp;
    b += static_cast<size_t>(decode_utf8(s, b, &tmp));
  }
  while (e > b) {
    const int64_t cp = code_point_before(s, e);
    if (cp < 0 || !is_python_space(static_cast<uint32_t>(cp))) break;
    std::string enc;
    append_utf8(static_cast<uint32_t>(cp), enc);
    e -= enc.size();
  }
  return s.substr(b, e - b);
}

std::string_view strip_chars(std::string_view s, char c, bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left)
    while (b < e && s[b] == c) ++b;
  if (right)
    while (e > b && s[e - 1] == c) --e;
  return s.substr(b, e - b);
}

}  // namespace flotilla
