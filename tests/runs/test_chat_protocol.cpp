// The app's side of the chat protocol (runs/chat_protocol.h), on the lines docs/chat.md gives (the
// real worker's are covered by ui_test_chatpage_e2e): a generate line with every option in the
// worker's spelling, the events parsed field by field, and lines the app does not know (not JSON,
// a future event, wrong types) parsed as unknown or defaults instead of throwing.
#include <nlohmann/json.hpp>
#include <string>

#include "check.h"
#include "runs/chat_protocol.h"

using namespace flotilla::runs;

int main() {
  ChatOptions o;
  o.max_tokens = 12;
  o.temperature = 0;
  o.top_k = 5;
  o.top_p = 0.9;
  o.repetition_penalty = 1.1;
  o.seed = 7;
  o.stops = {"\n\n", "END"};
  o.special = true;
  o.ignore_eos = true;
  const std::string line =
      chat_generate_line(3, {{"system", "Be brief."}, {"user", "Hi \xC3\xA9"}}, "chatml", o);
  CHECK(line.find('\n') == std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(line);
  CHECK(j["op"] == "generate" && j["id"] == 3 && j["format"] == "chatml");
  CHECK(j["messages"].size() == 2 && j["messages"][1]["role"] == "user" &&
        j["messages"][1]["content"] == "Hi \xC3\xA9");
  const nlohmann::json& opt = j["options"];
  CHECK(opt["max_tokens"] == 12 && opt["temperature"] == 0.0 && opt["top_k"] == 5 && opt["seed"] == 7);
  CHECK_NEAR(opt["top_p"].get<double>(), 0.9, 1e-12);
  CHECK_NEAR(opt["repetition_penalty"].get<double>(), 1.1, 1e-12);
  CHECK(opt["stop"].size() == 2 && opt["special"] == true && opt["ignore_eos"] == true);
  CHECK(!nlohmann::json::parse(chat_generate_line(1, {}, "auto", ChatOptions{}))["options"].contains("stop"));
  CHECK(nlohmann::json::parse(chat_cancel_line(3)) == (nlohmann::json{{"op", "cancel"}, {"id", 3}}));
  CHECK(nlohmann::json::parse(chat_quit_line()) == (nlohmann::json{{"op", "quit"}}));
  CHECK((chat_worker_args("/r/step-1", "") == std::vector<std::string>{"chat", "--checkpoint", "/r/step-1"}));
  CHECK((chat_worker_args("", "org/m") == std::vector<std::string>{"chat", "--model", "org/m"}));

  ChatEvent e = parse_chat_event(
      R"({"event":"ready","source":"/r/step-160","step":160,"tokenizer":"/t","format":"chatml","description":"d","context":64})");
  CHECK(e.kind == ChatEvent::Kind::kReady && e.step == 160 && e.format == "chatml" && e.context == 64 &&
        e.source == "/r/step-160" && e.tokenizer == "/t" && e.id == -1);
  e = parse_chat_event(R"({"id":1,"event":"start","prompt_tokens":25,"format":"chatml","context":64})");
  CHECK(e.kind == ChatEvent::Kind::kStart && e.id == 1 && e.prompt_tokens == 25);
  e = parse_chat_event(R"({"id":1,"event":"delta","text":"The \u00e9","tokens":3,"tokens_per_s":41.5})");
  CHECK(e.kind == ChatEvent::Kind::kDelta && e.text == "The \xC3\xA9" && e.tokens == 3 &&
        e.tokens_per_s == 41.5);
  e = parse_chat_event(
      R"({"id":1,"event":"done","stop":"cancelled","tokens":9,"prefill_ms":12.5,"tokens_per_s":40,"seconds":0.2})");
  CHECK(e.kind == ChatEvent::Kind::kDone && e.stop == "cancelled" && e.tokens == 9 && e.prefill_ms == 12.5);
  e = parse_chat_event(R"({"id":5,"event":"error","message":"temperature is 0 (greedy) or more"})");
  CHECK(e.kind == ChatEvent::Kind::kError && e.id == 5 && e.text.find("temperature") == 0);
  e = parse_chat_event(R"({"event":"error","message":"not a JSON object"})");
  CHECK(e.kind == ChatEvent::Kind::kError && e.id == -1);
  CHECK(parse_chat_event("not json").kind == ChatEvent::Kind::kUnknown);
  CHECK(parse_chat_event(R"({"event":"progress","id":"x"})").kind == ChatEvent::Kind::kUnknown);
  CHECK(parse_chat_event("[1,2]").kind == ChatEvent::Kind::kUnknown);
  CHECK(parse_chat_event(R"({"event":"delta","id":"one","text":7})").id == -1);  // wrong types: defaults
  std::printf("chat protocol: request lines, events, unknown lines\n");
  return flotilla_test::summary("test_chat_protocol");
}
