// Unicode text helpers for the Hugging Face tokenizer and chat rendering: NFC (utf8proc), and the
// character classes that the tokenizers library (Rust's regex crate) and Jinja (Python's str)
// use outside the pre-tokenizer regex.
//
// One non-obvious decision: these take arbitrary bytes. NFC normalizes each maximal run of valid
// UTF-8 and keeps other bytes as they are, so a file with a stray invalid byte still tokenizes
// (and decodes back) instead of failing; Hugging Face only ever sees valid text, where the result
// is plain NFC.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace flotilla {

// Unicode Normalization Form C.
std::string nfc(std::string_view text);

// Rust regex \s: Unicode White_Space.
bool is_unicode_white_space(uint32_t cp);
// Rust regex \w: Alphabetic, marks, decimal digits, connector punctuation, joiners.
bool is_rust_word_char(uint32_t cp);
// Python str.isspace(): bidirectional class WS, B or S, or category Zs.
bool is_python_space(uint32_t cp);

// Python's s.strip() / s.lstrip(chars) family, for Jinja's trim and the chat formats.
std::string_view python_strip(std::string_view s);
std::string_view strip_chars(std::string_view s, char c, bool left, bool right);

// The code point ending just before `end` (-1 at the start or after an invalid byte) and the one
// starting at `begin` (-1 at the end or at an invalid byte).
int64_t code_point_before(std::string_view text, size_t end);
int64_t code_point_at(std::string_view text, size_t begin);

}  // namespace flotilla
