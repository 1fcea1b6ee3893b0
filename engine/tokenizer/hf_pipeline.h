// The parts of a Hugging Face tokenizer.json that sit around byte-level BPE: added tokens, the
// normalizer, the pre-tokenizer steps, ignore_merges and the post-processor template. Filled by
// hf_json.cpp, run by hf_encode.cpp. Not part of the public API.
//
// One non-obvious decision: the ByteLevel step's byte -> printable-character map is never
// applied. BPE here works on bytes and the map is a bijection, so mapping the text and then
// looking the characters up gives exactly the byte ids; the map is used only when reading the
// vocabulary. The ByteLevel step must therefore be the last pre-tokenizer (checked on load).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/tokenizer/regex_split.h"

namespace flotilla {

struct HfAddedToken {
  uint32_t id = 0;
  std::string content;  // as in the file
  std::string pattern;  // what is matched: content, or its normalized form when `normalized`
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

struct HfPreStep {
  enum class Kind { kSplit, kDigits, kByteLevel } kind = Kind::kSplit;
  SplitRegex regex;  // kSplit (the pattern), kDigits (\p{N}), kByteLevel with use_regex (GPT-2's)
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;  // kByteLevel
  bool use_regex = true;          // kByteLevel
};

// Added tokens of one matching set (raw text or normalized text), indexed by first byte; each
// bucket lists token indices longest pattern first, so the first hit at a position is the
// leftmost-longest match the library's Aho-Corasick automaton finds.
struct HfAddedSet {
  std::array<std::vector<uint32_t>, 256> by_first_byte;
  bool empty = true;
};

struct HfPipeline {
  bool nfc = false;
  std::vector<HfPreStep> steps;
  std::vector<HfAddedToken> added;
  HfAddedSet raw_set, normalized_set;
  bool ignore_merges = false;
  std::unordered_map<std::string, uint32_t> whole_tokens;  // vocabulary bytes -> id (ignore_merges)
  std::vector<uint32_t> prefix, suffix;                    // post-processor: before / after $A
  std::optional<uint32_t> bos, eos, pad;
  bool cut_safe = false;  // see Tokenizer::can_cut_at_newlines
};

// The pre-tokenizer patterns of the families named in docs/data.md (facts of those formats).
extern const char* const kGpt2Pattern;
extern const char* const kLlama3Pattern;
extern const char* const kQwen2Pattern;

}  // namespace flotilla
