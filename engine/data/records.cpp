// JSONL records -> Record -> LabeledDocument, with file-and-line error messages.
//
// One non-obvious decision: a record with both "messages" and "prompt" is refused rather than
// guessed at, since either reading is plausible and the two give different loss masks.
#include "engine/data/records.h"

#include <nlohmann/json.hpp>

#include "engine/core/error.h"

namespace flotilla {

namespace {

using nlohmann::json;

const std::string& string_field(const json& obj, const char* key, const std::string& where,
                                const std::string& path) {
  const auto it = obj.find(key);
  if (it == obj.end()) throw_data(where + ": " + path + "." + key + " is missing");
  if (!it->is_string())
    throw_data(where + ": " + path + "." + key + " must be a string, not " + it->dump().substr(0, 60));
  return it->get_ref<const std::string&>();
}

}  // namespace

Record parse_record(const std::string& line, const std::string& text_field, const std::string& where) {
  json doc;
  try {
    doc = json::parse(line);
  } catch (const json::exception& e) {
    throw_data(where + ": not valid JSON (" + e.what() + ")");
  }
  if (!doc.is_object()) throw_data(where + ": a record must be a JSON object");
  Record r;
  const bool chat = doc.contains("messages"),
             completion = doc.contains("prompt") || doc.contains("completion");
  if (chat && completion)
    throw_data(where + ": a record has either \"messages\" or \"prompt\" + \"completion\", not both");
  if (chat) {
    const json& msgs = doc.at("messages");
    if (!msgs.is_array()) throw_data(where + ": messages must be a list of {\"role\", \"content\"}");
    r.kind = RecordKind::kChat;
    for (size_t i = 0; i < msgs.size(); ++i) {
      const std::string path = "messages[" + std::to_string(i) + "]";
      if (!msgs[i].is_object()) throw_data(where + ": " + path + " must be an object");
      ChatMessage m{
          string_field(msgs[i], "role", where, path), string_field(msgs[i], "content", where, path), {}};
      if (const auto it = msgs[i].find("reasoning_content"); it != msgs[i].end() && !it->is_null())
        m.reasoning = string_field(msgs[i], "reasoning_content", where, path);
      r.messages.push_back(std::move(m));
    }
    return r;
  }
  if (completion) {
    r.kind = RecordKind::kCompletion;
    r.prompt = string_field(doc, "prompt", where, "record");
    r.completion = string_field(doc, "completion", where, "record");
    return r;
  }
  const auto it = doc.find(text_field);
  if (it == doc.end() || !it->is_string())
    throw_data(
        where + ": no string field \"" + text_field +
        "\"; name the text field with --text-field (chat records have \"messages\", completion records "
        "\"prompt\" + \"completion\")");
  r.text = it->get<std::string>();
  return r;
}

RecordTokenizer::RecordTokenizer(const Tokenizer& tokenizer, std::optional<ChatFormat> format_flag)
    : tok_(tokenizer), flag_(format_flag) {}

LabeledDocument RecordTokenizer::tokenize(const Record& r, const std::string& where) {
  try {
    switch (r.kind) {
      case RecordKind::kText:
        return tokenize_text_document(tok_, r.text);
      case RecordKind::kCompletion:
        return tokenize_completion(tok_, flag_.value_or(ChatFormat::kPlain), r.prompt, r.completion);
      case RecordKind::kChat:
        if (!chat_) {
          chat_ = flag_ ? flag_ : default_chat_format(tok_);
          if (!chat_)
            throw_data(
                "the tokenizer has none of the chat tokens of the known formats (<|start_header_id|>, "
                "<|im_start|>); pass --chat-format llama3, chatml or qwen3");
        }
        return tokenize_chat(tok_, *chat_, r.messages);
    }
  } catch (const Error& e) {
    throw Error(e.code(), where + ": " + e.what());
  }
  return {};
}

}  // namespace flotilla
