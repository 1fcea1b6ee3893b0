// The chat answer's deltas (see chat_stream.h).
#include "engine/cli/chat_stream.h"

#include <algorithm>

namespace flotilla::cli {

size_t complete_utf8(const std::string& text, size_t n) {
  size_t start = n;
  for (int back = 0; back < 4 && start > 0; ++back) {
    const auto c = static_cast<unsigned char>(text[start - 1]);
    if ((c & 0xC0) != 0x80) {  // the last character's first byte
      const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
      const bool lead = c >= 0xC0 && c < 0xF8;
      return lead && n - (start - 1) < need ? start - 1 : n;
    }
    --start;
  }
  return n;
}

AnswerStream::AnswerStream(const Tokenizer& tokenizer, std::vector<std::string> stops, bool special)
    : tok_(tokenizer), stops_(std::move(stops)), special_(special) {
  for (const std::string& s : stops_) hold_ = std::max(hold_, s.empty() ? 0 : s.size() - 1);
}

std::string AnswerStream::add(int32_t id, bool ends) {
  if (stopped_) return {};
  if (special_ || !tok_.is_special(static_cast<uint32_t>(id))) {
    kept_.push_back(static_cast<uint32_t>(id));
    text_ = tok_.decode(kept_);
  }
  size_t cut = std::string::npos;
  for (const std::string& s : stops_)
    if (!s.empty()) cut = std::min(cut, text_.find(s));
  if (cut != std::string::npos) {
    text_.resize(cut);
    stopped_ = true;
  }
  ends = ends || stopped_;
  size_t ready = ends ? text_.size() : (text_.size() > hold_ ? text_.size() - hold_ : 0);
  if (!ends) ready = complete_utf8(text_, ready);
  if (ready <= sent_) return {};
  std::string delta = text_.substr(sent_, ready - sent_);
  sent_ = ready;
  return delta;
}

std::string AnswerStream::flush() {
  if (text_.size() <= sent_) return {};
  std::string rest = text_.substr(sent_);
  sent_ = text_.size();
  return rest;
}

}  // namespace flotilla::cli
