// The chat server's request and event lines (see chat_protocol.h).
#include "runs/chat_protocol.h"

#include <nlohmann/json.hpp>

namespace flotilla::runs {

using json = nlohmann::json;

std::vector<std::string> chat_worker_args(const std::string& checkpoint, const std::string& hf_model) {
  if (!checkpoint.empty()) return {"chat", "--checkpoint", checkpoint};
  return {"chat", "--model", hf_model};
}

std::string chat_generate_line(int64_t id, const std::vector<ChatTurn>& messages, const std::string& format,
                               const ChatOptions& o) {
  json m = json::array();
  for (const ChatTurn& t : messages) m.push_back({{"role", t.role}, {"content", t.content}});
  json options = {{"max_tokens", o.max_tokens},
                  {"temperature", o.temperature},
                  {"top_k", o.top_k},
                  {"top_p", o.top_p},
                  {"repetition_penalty", o.repetition_penalty},
                  {"seed", o.seed}};
  if (!o.stops.empty()) options["stop"] = o.stops;
  if (o.special) options["special"] = true;
  if (o.ignore_eos) options["ignore_eos"] = true;
  const json j = {{"op", "generate"}, {"id", id}, {"messages", m}, {"format", format}, {"options", options}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string chat_cancel_line(int64_t id) { return json{{"op", "cancel"}, {"id", id}}.dump(); }
std::string chat_quit_line() { return json{{"op", "quit"}}.dump(); }

ChatEvent parse_chat_event(const std::string& line) {
  ChatEvent e;
  const json j = json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return e;
  const auto str = [&](const char* k) {
    return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : std::string();
  };
  const auto num = [&](const char* k) {
    return j.contains(k) && j[k].is_number() ? j[k].get<double>() : 0.0;
  };
  const auto whole = [&](const char* k, int64_t fallback) {
    return j.contains(k) && j[k].is_number_integer() ? j[k].get<int64_t>() : fallback;
  };
  const std::string kind = str("event");
  e.kind = kind == "ready"   ? ChatEvent::Kind::kReady
           : kind == "start" ? ChatEvent::Kind::kStart
           : kind == "delta" ? ChatEvent::Kind::kDelta
           : kind == "done"  ? ChatEvent::Kind::kDone
           : kind == "error" ? ChatEvent::Kind::kError
                             : ChatEvent::Kind::kUnknown;
  e.id = whole("id", -1);
  e.text = kind == "error" ? str("message") : str("text");
  e.stop = str("stop");
  e.format = str("format");
  e.source = str("source");
  e.tokenizer = str("tokenizer");
  e.description = str("description");
  e.step = whole("step", -1);
  e.tokens = whole("tokens", 0);
  e.prompt_tokens = whole("prompt_tokens", 0);
  e.context = static_cast<int>(whole("context", 0));
  e.tokens_per_s = num("tokens_per_s");
  e.prefill_ms = num("prefill_ms");
  e.seconds = num("seconds");
  return e;
}

}  // namespace flotilla::runs
