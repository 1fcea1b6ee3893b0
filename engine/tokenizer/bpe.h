// Byte-level BPE tokenizer: trained here, loaded from GPT-2's vocab.json + merges.txt, or loaded
// from a Hugging Face tokenizer.json (GPT-2, Llama 3, Qwen 2/3, SmolLM2 styles).
//
// Every token is a byte string; the 256 single bytes are always tokens (so any input, valid UTF-8
// or not, encodes and decodes back exactly), merges are applied in rank order within pre-tokens,
// and special tokens (<|endoftext|>) are ids outside the merge graph. One representation and one
// class serve all three origins: a trained tokenizer has byte b = id b, merges at 256.. and the
// end-of-text token last; a GPT-2 or tokenizer.json tokenizer keeps its file's ids. A
// tokenizer.json adds the Hugging Face pipeline around the shared BPE (added tokens, NFC, Split
// regexes run by PCRE2, ignore_merges, the post-processor's BOS/EOS), token for token equal to
// the `tokenizers` library. Formats: docs/data.md "Tokenizer files".
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
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

  // Opaque outside engine/tokenizer/ (defined in bpe_impl.h, where the loaders fill it).
  struct Impl;

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

  // Loads a tokenizer from a folder or a file. A folder: its tokenizer.json (with
  // tokenizer_config.json beside it when present), else its vocab.json + merges.txt (GPT-2), else
  // its tokenizer.flotilla.json (our format). A file: our JSON, a tokenizer.json, or a vocab.json
  // (merges.txt beside it). Throws Error(kData) naming the file, the JSON path and the fault.
  static Tokenizer load(const std::string& path);
  static Tokenizer load_gpt2(const std::string& vocab_json_path, const std::string& merges_txt_path);
  // A Hugging Face tokenizer.json, with its tokenizer_config.json ("" when there is none: then the
  // tokenizer.json alone decides). Refuses what is not byte-level BPE with the JSON path, e.g.
  // `model.type "Unigram" is not supported (byte-level BPE only)`.
  static Tokenizer load_hf(const std::string& tokenizer_json_path, const std::string& config_json_path = "");
  static Tokenizer from_hf_json(const std::string& json_text, const std::string& source_name,
                                const std::string& config_text = "", const std::string& config_name = "");
  // Writes our JSON format durably (tmp file, fsync, rename).
  void save(const std::string& path) const;
  std::string to_json() const;
  static Tokenizer from_json(const std::string& json_text, const std::string& source_name);

  // Encodes text. Special-token text is ordinary text unless allow_special is set, in which case
  // each occurrence of a special token's text becomes its id. A tokenizer.json's non-special added
  // tokens are always matched (as the tokenizers library does); allow_special = false is its
  // encode_special_tokens / split_special_tokens mode. No post-processor tokens are added.
  std::vector<uint32_t> encode(std::string_view text, bool allow_special = false) const;
  void encode_append(std::string_view text, std::vector<uint32_t>& out) const;
  // The general form: appends ids and, when starts is given, each token's first byte offset. The
  // offsets index `text` when normalize(text) == text (always without a normalizer; for NFC
  // tokenizers pass normalized text, as chat rendering does).
  void encode_append(std::string_view text, bool allow_special, std::vector<uint32_t>& ids,
                     std::vector<uint32_t>* starts) const;
  // What transformers' tokenizer(text) gives: special tokens in the text are matched, then the
  // post-processor's tokens are added around the ids (Llama 3: <|begin_of_text|> first).
  std::vector<uint32_t> encode_model_input(std::string_view text) const;
  // The post-processor's single-sequence template: ids before and after a sequence.
  const std::vector<uint32_t>& template_prefix() const;
  const std::vector<uint32_t>& template_suffix() const;
  // The tokenizer.json normalizer applied to text (NFC or nothing).
  std::string normalize(std::string_view text) const;
  bool has_normalizer() const;
  // True when text files may be encoded in blocks cut just after a newline between two ASCII
  // non-space characters (docs/data.md "data prepare"): our formats, and tokenizer.json files
  // whose pre-tokenizer regexes are the known GPT-2 / Llama 3 / Qwen patterns.
  bool can_cut_at_newlines() const;
  // Concatenates the tokens' bytes (specials as their text). Throws Error(kData) for an unknown id.
  std::string decode(const std::vector<uint32_t>& ids) const;

  int vocab_size() const;  // ids are 0 .. vocab_size()-1
  // The end-of-document token: <|endoftext|>, else the tokenizer's EOS. Throws Error(kData) when it
  // has neither.
  uint32_t eot_id() const;
  // Named tokens from tokenizer_config.json (bos_token, eos_token, pad_token) or, without one, the
  // usual names of the family (<|begin_of_text|>, <|end_of_text|>, <|endoftext|>); nullopt if absent.
  std::optional<uint32_t> bos_id() const;
  std::optional<uint32_t> eos_id() const;
  std::optional<uint32_t> pad_id() const;
  // The id of an added token's content or of a vocabulary token's bytes; nullopt when neither.
  std::optional<uint32_t> token_id(std::string_view content) const;
  bool is_special(uint32_t id) const;
  const std::string& token_bytes(uint32_t id) const;
  const std::vector<Merge>& merges() const;  // in rank order
  const std::vector<Special>& specials() const;
  const std::string& origin() const;  // "trained", "gpt2" or "tokenizer.json"

  // Test hook: BPE of one pre-token, by the simple rank-pass algorithm (long = false) or the
  // heap algorithm used for long pieces (long = true). Both must agree.
  std::vector<uint32_t> encode_piece_for_test(std::string_view piece, bool long_algorithm) const;

 private:
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
