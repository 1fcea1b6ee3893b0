// The answer of `flotilla-worker chat` as it grows, cut into the deltas the app shows (docs/chat.md).
//
// Decision: the text is re-decoded from all the answer's ids at each token (as `sample` does), not
// token by token, because a token can hold part of a UTF-8 character whose rest comes in the next
// token. A delta never ends inside a character (the first bytes of one wait for its last), and the
// bytes a stop string could still turn out to be are held back until it can no longer appear; the
// deltas then concatenate to the answer, each valid UTF-8 where the model's bytes are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/tokenizer/bpe.h"

namespace flotilla::cli {

// The length of the longest prefix of text[0, n) that does not end inside a UTF-8 character (a
// lead byte whose continuation bytes have not all arrived). Invalid bytes are never held.
size_t complete_utf8(const std::string& text, size_t n);

class AnswerStream {
 public:
  // `special`: special tokens are part of the text (else left out).
  AnswerStream(const Tokenizer& tokenizer, std::vector<std::string> stops, bool special);

  // Adds the next generated id (`ends`: it ends the answer, an end token) and returns the text that
  // can be shown now ("" when nothing new). After a stop string has appeared the answer is cut
  // before it and stopped() is true.
  std::string add(int32_t id, bool ends);
  // The rest of the answer, held back so far (at the end: the token limit, a cancel).
  std::string flush();
  bool stopped() const { return stopped_; }
  const std::string& text() const { return text_; }

 private:
  const Tokenizer& tok_;
  std::vector<std::string> stops_;
  bool special_;
  size_t hold_ = 0;  // the longest stop string's length - 1
  std::vector<uint32_t> kept_;
  std::string text_;
  size_t sent_ = 0;
  bool stopped_ = false;
};

}  // namespace flotilla::cli
