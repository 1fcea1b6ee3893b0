// Byte-level BPE tokenizer: trained here, or loaded from GPT-2's vocab.json + merges.txt.
//
// Every token is a byte string; the 256 single bytes are always tokens (so any input, valid UTF-8
// or not, encodes and decodes back exactly), merges are applied in rank order within GPT-2
// pre-tokens, and special tokens (<|endoftext|>) are ids outside the merge graph. One
// representation serves both origins: a trained tokenizer has byte b = id b, merges at 256.. and
// the end-of-text token last; a GPT-2 tokenizer keeps the ids of its vocab.json (EOT = 50256).
// Formats: docs/data.md "Tokenizer files".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace flotilla {

inline constexpr const char* kEndOfText = "<|endoftext|>";

class Tokenizer {
 public:
  struct Merge {
    uint32_t left, right, result;
  };
  struct Special {
    uint32_t id;
    std::string text;
  };

  Tokenizer();
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // Trains on text documents (each pre-tokenized separately) to vocab_size ids, the last of which
  // is <|endoftext|>. Merges the most frequent adjacent pair each round; ties go to the pair with
  // the smaller (left, right) ids, so training is deterministic. Stops early when no pair occurs
  // twice (vocab_size() then reports the smaller size). Throws Error(kUsage) for vocab_size < 257.
  static Tokenizer train(const std::vector<std::string_view>& documents, int vocab_size);
  // Same, reading each file as one document. Throws Error(kData) naming an unreadable file.
  static Tokenizer train_files(const std::vector<std::string>& paths, int vocab_size);

  // Loads our JSON, a directory holding GPT-2's vocab.json + merges.txt, or a vocab.json path
  // (merges.txt beside it). Throws Error(kData) naming the file and the fault.
  static Tokenizer load(const std::string& path);
  static Tokenizer load_gpt2(const std::string& vocab_json_path, const std::string& merges_txt_path);
  // Writes our JSON format durably (tmp file, fsync, rename).
  void save(const std::string& path) const;
  std::string to_json() const;
  static Tokenizer from_json(const std::string& json_text, const std::string& source_name);

  // Encodes text. Special-token text is ordinary text unless allow_special is set, in which case
  // each occurrence of a special token's text becomes its id.
  std::vector<uint32_t> encode(std::string_view text, bool allow_special = false) const;
  void encode_append(std::string_view text, std::vector<uint32_t>& out) const;
  // Concatenates the tokens' bytes (specials as their text). Throws Error(kData) for an unknown id.
  std::string decode(const std::vector<uint32_t>& ids) const;

  int vocab_size() const;   // ids are 0 .. vocab_size()-1
  uint32_t eot_id() const;  // <|endoftext|>
  const std::string& token_bytes(uint32_t id) const;
  const std::vector<Merge>& merges() const;  // in rank order
  const std::vector<Special>& specials() const;
  const std::string& origin() const;  // "trained" or "gpt2"

  // Test hook: BPE of one pre-token, by the simple rank-pass algorithm (long = false) or the
  // heap algorithm used for long pieces (long = true). Both must agree.
  std::vector<uint32_t> encode_piece_for_test(std::string_view piece, bool long_algorithm) const;

 private:
  struct Impl;  // engine/tokenizer/bpe_impl.h
  std::unique_ptr<Impl> impl_;
};

// GPT-2's reversible byte -> printable code point map (bytes_to_unicode in its encoder.py):
// printable Latin-1 bytes map to themselves, the other 68 to U+0100.. in byte order
// (space -> U+0120 'Ġ', newline -> U+010A 'Ċ').
uint32_t gpt2_byte_to_code_point(uint8_t byte);
// The inverse; returns -1 for a code point that is not in the map.
int gpt2_code_point_to_byte(uint32_t cp);
// A byte string in GPT-2's printable form ("Ġthe"), and back (false when a character is not mapped).
std::string gpt2_bytes_to_text(std::string_view bytes);
bool gpt2_text_to_bytes(std::string_view text, std::string* bytes);

}  // namespace flotilla
