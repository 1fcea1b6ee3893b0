// The chat server's deltas (engine/cli/chat_stream.h) on the golden SmolLM2 tokenizer (byte-level
// BPE: a multi-byte character can be split across tokens): fed one token at a time, every delta is
// valid UTF-8 and whole characters, the deltas (and the final flush) concatenate to the answer, a
// stop string cuts the answer before it and is never shown in part, special tokens are left out
// unless asked; complete_utf8 on hand-made byte strings.
#include <string>
#include <vector>

#include "check.h"
#include "engine/cli/chat_stream.h"
#include "engine/tokenizer/bpe.h"

using flotilla::Tokenizer;
using flotilla::cli::AnswerStream;
using flotilla::cli::complete_utf8;

namespace {

bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

struct Streamed {
  std::vector<std::string> deltas;
  std::string all;
  bool stopped = false;
};

Streamed stream(const Tokenizer& tok, const std::vector<uint32_t>& ids, const std::vector<std::string>& stops,
                bool special, int end_id = -1) {
  AnswerStream a(tok, stops, special);
  Streamed out;
  for (uint32_t id : ids) {
    const std::string d = a.add(static_cast<int32_t>(id), static_cast<int>(id) == end_id);
    if (!d.empty()) out.deltas.push_back(d);
    out.all += d;
    if (a.stopped()) break;
  }
  const std::string rest = a.flush();
  if (!rest.empty()) out.deltas.push_back(rest);
  out.all += rest;
  out.stopped = a.stopped();
  return out;
}

}  // namespace

int main() {
  CHECK(complete_utf8("abc", 3) == 3);
  CHECK(complete_utf8("ab\xC3", 3) == 2);        // é's first byte alone
  CHECK(complete_utf8("ab\xC3\xA9", 4) == 4);    // é whole
  CHECK(complete_utf8("\xE6\x97", 2) == 0);      // 日 cut after 2 of 3 bytes
  CHECK(complete_utf8("\xF0\x9F\x8E", 3) == 0);  // 🎉 cut after 3 of 4
  CHECK(complete_utf8("\xF0\x9F\x8E\x89", 4) == 4);
  CHECK(complete_utf8("a\x80", 2) == 2);         // a stray continuation byte is not held
  CHECK(complete_utf8("a\xFF", 2) == 2);         // nor an invalid byte
  CHECK(complete_utf8("\xC3\xA9\xE6", 2) == 2);  // the prefix asked for, not the string

  const Tokenizer tok =
      Tokenizer::load(std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/tokenizers/smollm2");
  const std::string text =
      "Caf\xC3\xA9 \xE2\x80\x94 \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E ok \xF0\x9F\x8E\x89 done";
  const std::vector<uint32_t> ids = tok.encode(text);
  // Some token must end inside a character, or this test proves nothing about holding bytes back.
  bool split = false;
  for (size_t n = 1; n < ids.size(); ++n) {
    const std::string prefix =
        tok.decode(std::vector<uint32_t>(ids.begin(), ids.begin() + static_cast<long>(n)));
    split = split || !valid_utf8(prefix);
  }
  CHECK_MSG(split, "no token of the text ends inside a character (%zu tokens)", ids.size());

  Streamed s = stream(tok, ids, {}, false);
  CHECK_MSG(s.all == text, "[%s]", s.all.c_str());
  CHECK(s.deltas.size() > 3 && !s.stopped);
  for (const std::string& d : s.deltas) CHECK_MSG(valid_utf8(d), "delta [%s] is not valid UTF-8", d.c_str());

  // A stop string: the answer ends before it; no delta ever shows a part of it.
  s = stream(tok, ids, {"\xE6\x97\xA5\xE6\x9C\xAC"}, false);
  CHECK_MSG(s.all == "Caf\xC3\xA9 \xE2\x80\x94 " && s.stopped, "[%s]", s.all.c_str());
  for (const std::string& d : s.deltas) CHECK(valid_utf8(d) && d.find('\xE6') == std::string::npos);
  // A stop string that never comes: held bytes come out at the end.
  s = stream(tok, ids, {"ok!!"}, false);
  CHECK_MSG(s.all == text && !s.stopped, "[%s]", s.all.c_str());

  // Special tokens: left out, or kept when asked; an end token ends the answer (nothing held).
  const uint32_t im_end = *tok.token_id("<|im_end|>");
  std::vector<uint32_t> with_end = tok.encode("Paris.");
  with_end.push_back(im_end);
  s = stream(tok, with_end, {"xyz"}, false, static_cast<int>(im_end));
  CHECK_MSG(s.all == "Paris." && s.deltas.back() != "", "[%s]", s.all.c_str());
  s = stream(tok, with_end, {}, true, static_cast<int>(im_end));
  CHECK_MSG(s.all == "Paris.<|im_end|>", "[%s]", s.all.c_str());

  std::printf("chat stream: whole-character deltas, stop strings held back, special tokens\n");
  return flotilla_test::summary("test_chat_stream");
}
