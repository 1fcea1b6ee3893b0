// GPT-2 pre-tokenization: splits text into the "words" that BPE then merges within.
//
// Implements, without a regex engine, GPT-2's pattern
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// with the same leftmost-alternative semantics, on UTF-8 bytes. The one non-obvious decision: it
// runs on bytes, not on decoded text, and a byte that is not part of valid UTF-8 is a one-byte
// "other" character, so any byte string splits into pieces that concatenate back to it exactly
// (GPT-2 itself only ever sees valid text). Character classes: unicode_classes.cpp (Unicode 14.0).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace flotilla {

enum class CharClass : uint8_t { kLetter, kNumber, kSpace, kOther };

// Class of a Unicode code point (\p{L}, \p{N}, \s, or anything else).
CharClass classify_code_point(uint32_t cp);

// Decodes the UTF-8 character at text[pos]; returns its byte length (1 for an invalid byte, with
// *cp set to 0xFFFFFFFF). Rejects overlong forms, surrogates and code points above U+10FFFF.
int decode_utf8(std::string_view text, size_t pos, uint32_t* cp);

// Appends one character's UTF-8 encoding to out.
void append_utf8(uint32_t cp, std::string& out);

// Splits text into GPT-2 pre-tokens; the pieces are views into text and concatenate to it.
void pretokenize(std::string_view text, std::vector<std::string_view>& out);

}  // namespace flotilla
