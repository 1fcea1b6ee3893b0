// JSONL training records for `data prepare`: text, prompt/completion, and chat (messages), and
// their tokenization into labeled documents with the chosen chat format.
//
// One non-obvious decision: the kind of a record is read from its keys, line by line, so one file
// may mix kinds; the chat format is resolved once per run (--chat-format, else the tokenizer's own
// family) and only when a chat record needs it, so completion-only data never needs chat tokens.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/data/chat_format.h"

namespace flotilla {

enum class RecordKind { kText, kCompletion, kChat };

struct Record {
  RecordKind kind = RecordKind::kText;
  std::string text;                   // kText
  std::string prompt, completion;     // kCompletion
  std::vector<ChatMessage> messages;  // kChat
};

// Parses one JSONL line: {"messages": [{"role", "content"[, "reasoning_content"]}...]},
// {"prompt", "completion"}, or {text_field: "..."}. `where` ("data.jsonl line 3") starts every
// error message; throws Error(kData) naming the key that is missing or of the wrong type.
Record parse_record(const std::string& line, const std::string& text_field, const std::string& where);

// Turns records into labeled documents. `format_flag` is --chat-format (nullopt: chat records use
// the tokenizer's family, prompt/completion records use plain).
class RecordTokenizer {
 public:
  RecordTokenizer(const Tokenizer& tokenizer, std::optional<ChatFormat> format_flag);
  // Throws Error(kData) prefixed with `where` when the record cannot be rendered.
  LabeledDocument tokenize(const Record& record, const std::string& where);
  // The format chat records were rendered with; nullopt while none was seen.
  std::optional<ChatFormat> chat_format() const { return chat_; }

 private:
  const Tokenizer& tok_;
  std::optional<ChatFormat> flag_, chat_;
};

}  // namespace flotilla
