// Chat formats: rendering conversations to segments, and tokenizing them with offset-based masks.
//
// One non-obvious decision: for a tokenizer with a normalizer (Qwen's NFC) each segment is
// normalized before the segments are joined, so the byte offsets of the tokens index the joined
// string directly. NFC is idempotent and no segment boundary sits before a combining character
// (they follow template text or special tokens), so the ids equal tokenizing the raw rendering.
#include "engine/data/chat_format.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/interop/model_source.h"
#include "engine/tokenizer/unicode_text.h"

namespace flotilla {

namespace {

constexpr const char* kLlamaHeaderStart = "<|start_header_id|>";
constexpr const char* kLlamaHeaderEnd = "<|end_header_id|>";
constexpr const char* kLlamaEot = "<|eot_id|>";
constexpr const char* kImStart = "<|im_start|>";
constexpr const char* kImEnd = "<|im_end|>";

void require_tokens(const Tokenizer& tok, ChatFormat format, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (!tok.token_id(n))
      throw_data(
          std::string("chat format ") + chat_format_name(format) + " needs the token " + n +
          ", which this tokenizer does not have; choose the tokenizer's own format with --chat-format");
}

void check_role(const ChatMessage& m, size_t index) {
  if (m.role != "system" && m.role != "user" && m.role != "assistant")
    throw_data("messages[" + std::to_string(index) + "].role \"" + m.role +
               "\" is not supported (system, user or assistant)");
}

// Python's str.split(sep)[0] and [-1].
std::string_view before_first(std::string_view s, std::string_view sep) {
  const size_t at = s.find(sep);
  return at == std::string_view::npos ? s : s.substr(0, at);
}
std::string_view after_last(std::string_view s, std::string_view sep) {
  const size_t at = s.rfind(sep);
  return at == std::string_view::npos ? s : s.substr(at + sep.size());
}

void render_llama3(const std::vector<ChatMessage>& messages, const Tokenizer& tok,
                   std::vector<ChatSegment>& out) {
  require_tokens(tok, ChatFormat::kLlama3, {kLlamaHeaderStart, kLlamaHeaderEnd, kLlamaEot});
  const auto bos = tok.bos_id();
  if (!bos)
    throw_data(
        "chat format llama3 needs a BOS token (<|begin_of_text|> or bos_token in tokenizer_config.json)");
  out.push_back({tok.token_bytes(*bos), false});
  for (const ChatMessage& m : messages) {
    out.push_back({std::string(kLlamaHeaderStart) + m.role + kLlamaHeaderEnd + "\n\n", false});
    out.push_back({std::string(python_strip(m.content)) + kLlamaEot, m.role == "assistant"});
  }
}

void render_chatml(const std::vector<ChatMessage>& messages, const Tokenizer& tok,
                   std::vector<ChatSegment>& out) {
  require_tokens(tok, ChatFormat::kChatml, {kImStart, kImEnd});
  for (const ChatMessage& m : messages) {
    out.push_back({std::string(kImStart) + m.role + "\n", false});
    out.push_back({m.content + kImEnd, m.role == "assistant"});
    out.push_back({"\n", false});
  }
}

// ChatML, plus Qwen 3's think block: an assistant turn after the last user turn that is the last
// message or has reasoning is written "<think>\n{reasoning}\n</think>\n\n{content}"; reasoning
// comes from reasoning_content or from a "...</think>" prefix of the content, which earlier turns
// drop.
void render_qwen3(const std::vector<ChatMessage>& messages, const Tokenizer& tok,
                  std::vector<ChatSegment>& out) {
  require_tokens(tok, ChatFormat::kQwen3, {kImStart, kImEnd});
  long last_user = -1;
  for (size_t i = 0; i < messages.size(); ++i)
    if (messages[i].role == "user") last_user = static_cast<long>(i);
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role != "assistant") {
      out.push_back({std::string(kImStart) + m.role + "\n" + m.content + kImEnd + "\n", false});
      continue;
    }
    std::string_view content = m.content;
    std::string reasoning;
    if (m.reasoning) {
      reasoning = *m.reasoning;
    } else if (content.find("</think>") != std::string_view::npos) {
      const std::string_view head = strip_chars(before_first(content, "</think>"), '\n', false, true);
      reasoning = std::string(strip_chars(after_last(head, "<think>"), '\n', true, false));
      content = strip_chars(after_last(content, "</think>"), '\n', true, false);
    }
    out.push_back({std::string(kImStart) + "assistant\n", false});
    std::string body;
    if (static_cast<long>(i) > last_user && (i + 1 == messages.size() || !reasoning.empty()))
      body = "<think>\n" + std::string(strip_chars(reasoning, '\n', true, true)) + "\n</think>\n\n" +
             std::string(strip_chars(content, '\n', true, false));
    else
      body = std::string(content);
    out.push_back({body + kImEnd, true});
    out.push_back({"\n", false});
  }
}

}  // namespace

int64_t LabeledDocument::target_count() const {
  int64_t n = 0;
  for (uint8_t t : target) n += t;
  return n;
}

bool parse_chat_format(std::string_view name, ChatFormat* out) {
  static constexpr std::pair<std::string_view, ChatFormat> kNames[] = {{"llama3", ChatFormat::kLlama3},
                                                                       {"chatml", ChatFormat::kChatml},
                                                                       {"qwen3", ChatFormat::kQwen3},
                                                                       {"plain", ChatFormat::kPlain}};
  for (const auto& [n, f] : kNames)
    if (n == name) {
      *out = f;
      return true;
    }
  return false;
}

const char* chat_format_name(ChatFormat format) {
  switch (format) {
    case ChatFormat::kLlama3:
      return "llama3";
    case ChatFormat::kChatml:
      return "chatml";
    case ChatFormat::kQwen3:
      return "qwen3";
    case ChatFormat::kPlain:
      return "plain";
  }
  return "?";
}

std::optional<ChatFormat> default_chat_format(const Tokenizer& tok) {
  if (tok.token_id(kLlamaHeaderStart)) return ChatFormat::kLlama3;
  if (tok.token_id(kImStart)) return tok.token_id("<think>") ? ChatFormat::kQwen3 : ChatFormat::kChatml;
  return std::nullopt;
}

std::vector<ChatSegment> render_chat(ChatFormat format, const std::vector<ChatMessage>& messages,
                                     const Tokenizer& tok) {
  if (messages.empty()) throw_data("messages is empty: a conversation needs at least one message");
  for (size_t i = 0; i < messages.size(); ++i) check_role(messages[i], i);
  std::vector<ChatSegment> out;
  switch (format) {
    case ChatFormat::kLlama3:
      render_llama3(messages, tok, out);
      break;
    case ChatFormat::kChatml:
      render_chatml(messages, tok, out);
      break;
    case ChatFormat::kQwen3:
      render_qwen3(messages, tok, out);
      break;
    case ChatFormat::kPlain:
      throw_data(
          "chat format plain is for prompt/completion records; give --chat-format llama3, chatml or qwen3 "
          "for messages");
  }
  return out;
}

std::string render_chat_text(ChatFormat format, const std::vector<ChatMessage>& messages,
                             const Tokenizer& tok) {
  std::string text;
  for (const ChatSegment& s : render_chat(format, messages, tok)) text += s.text;
  return text;
}

std::vector<uint32_t> chat_prompt_ids(const Tokenizer& tok, ChatFormat format,
                                      const std::vector<ChatMessage>& messages) {
  std::vector<ChatSegment> segments = render_chat(format, messages, tok);
  switch (format) {
    case ChatFormat::kLlama3:
      segments.push_back({std::string(kLlamaHeaderStart) + "assistant" + kLlamaHeaderEnd + "\n\n", false});
      break;
    case ChatFormat::kChatml:
    case ChatFormat::kQwen3:
      segments.push_back({std::string(kImStart) + "assistant\n", false});
      break;
    case ChatFormat::kPlain:
      break;  // render_chat refused it
  }
  return tokenize_segments(tok, segments).ids;
}

std::vector<uint32_t> stop_token_ids(const Tokenizer& tok, std::optional<ChatFormat> format) {
  std::vector<uint32_t> ids;
  auto add = [&](std::optional<uint32_t> id) {
    if (id && std::find(ids.begin(), ids.end(), *id) == ids.end()) ids.push_back(*id);
  };
  if (format == ChatFormat::kLlama3) add(tok.token_id(kLlamaEot));
  if (format == ChatFormat::kChatml || format == ChatFormat::kQwen3) add(tok.token_id(kImEnd));
  add(tok.eos_id());
  try {
    add(tok.eot_id());
  } catch (const Error&) {  // neither <|endoftext|> nor an EOS: nothing more to stop at
  }
  return ids;
}

bool has_chat_template(const std::string& path_or_name) {
  namespace fs = std::filesystem;
  const std::string path = interop::local_model_folder(path_or_name, "--tokenizer",
                                                       interop::hub::FileSet::kTokenizer);  // a Hub name
  std::error_code ec;
  const fs::path dir = fs::is_directory(path, ec) ? fs::path(path) : fs::path(path).parent_path();
  if (fs::exists(dir / "chat_template.jinja", ec) || fs::exists(dir / "chat_template.json", ec)) return true;
  std::ifstream in(dir / "tokenizer_config.json");
  if (!in) return false;
  const nlohmann::json config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return config.is_object() && config.contains("chat_template") && !config["chat_template"].is_null();
}

std::optional<ChatFormat> tokenizer_chat_format(const std::string& path, const Tokenizer& tok) {
  return has_chat_template(path) ? default_chat_format(tok) : std::nullopt;
}

LabeledDocument tokenize_segments(const Tokenizer& tok, const std::vector<ChatSegment>& segments) {
  std::string text;
  std::vector<std::pair<size_t, size_t>> spans;  // target byte ranges, in order
  for (const ChatSegment& s : segments) {
    const std::string part = tok.normalize(s.text);
    if (s.target && !part.empty()) spans.emplace_back(text.size(), text.size() + part.size());
    text += part;
  }
  LabeledDocument doc;
  std::vector<uint32_t> starts;
  tok.encode_append(text, true, doc.ids, &starts);
  doc.target.assign(doc.ids.size(), 0);
  size_t span = 0;
  for (size_t k = 0; k < doc.ids.size(); ++k) {
    const size_t begin = starts[k], end = k + 1 < starts.size() ? starts[k + 1] : text.size();
    while (span < spans.size() && begin >= spans[span].second) ++span;
    if (span == spans.size()) break;
    if (end > spans[span].first) doc.target[k] = 1;  // the token overlaps a target span
  }
  return doc;
}

LabeledDocument tokenize_chat(const Tokenizer& tok, ChatFormat format,
                              const std::vector<ChatMessage>& messages) {
  return tokenize_segments(tok, render_chat(format, messages, tok));
}

LabeledDocument tokenize_completion(const Tokenizer& tok, ChatFormat format, std::string_view prompt,
                                    std::string_view completion) {
  if (format != ChatFormat::kPlain)
    return tokenize_chat(tok, format,
                         {{"user", std::string(prompt), {}}, {"assistant", std::string(completion), {}}});
  const auto eos = tok.eos_id();
  if (!eos)
    throw_data(
        "prompt/completion records end with EOS, and this tokenizer has none; set eos_token in "
        "tokenizer_config.json");
  const std::string p = tok.normalize(prompt), c = tok.normalize(completion);
  const std::string text = p + c;
  LabeledDocument doc;
  doc.ids = tok.template_prefix();
  std::vector<uint32_t> starts;
  tok.encode_append(text, true, doc.ids, &starts);
  const size_t first = tok.template_prefix().size();
  doc.target.assign(doc.ids.size(), 0);
  for (size_t k = 0; k < starts.size(); ++k) {
    const size_t end = k + 1 < starts.size() ? starts[k + 1] : text.size();
    if (end > p.size()) doc.target[first + k] = 1;
  }
  for (uint32_t id : tok.template_suffix()) {
    doc.ids.push_back(id);
    doc.target.push_back(0);
  }
  if (doc.ids.empty() || doc.ids.back() != *eos) {
    doc.ids.push_back(*eos);
    doc.target.push_back(0);
  }
  doc.target.back() = 1;  // learning to stop
  return doc;
}

void append_text_document(const Tokenizer& tok, std::string_view text, std::vector<uint32_t>& out) {
  if (tok.origin() != "tokenizer.json") {
    out.push_back(tok.eot_id());
    tok.encode_append(text, out);
    return;
  }
  out.insert(out.end(), tok.template_prefix().begin(), tok.template_prefix().end());
  tok.encode_append(text, true, out, nullptr);
  out.insert(out.end(), tok.template_suffix().begin(), tok.template_suffix().end());
  const uint32_t eot = tok.eot_id();
  if (out.empty() || out.back() != eot) out.push_back(eot);
}

LabeledDocument tokenize_text_document(const Tokenizer& tok, std::string_view text) {
  LabeledDocument doc;
  append_text_document(tok, text, doc.ids);
  doc.target.assign(doc.ids.size(), 1);
  return doc;
}

}  // namespace flotilla
