// Chat rendering against transformers' apply_chat_template: for the golden conversations and each
// family's format (llama3 on the Llama-style tokenizer, chatml and qwen3 on the Qwen-style one,
// chatml on the SmolLM2-style one), the rendered text, the ids and the assistant mask
// (return_assistant_tokens_mask, from the {% generation %} blocks of the templates written in
// make_tokenizer_goldens.py) must be identical; prompt/completion records ("plain") against
// tokenizer(prompt + completion) + EOS. Also the format names, the default format from the
// tokenizer's special tokens, and the errors for roles and missing tokens.
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "check.h"
#include "engine/core/error.h"
#include "engine/data/chat_format.h"
#include "test_data_util.h"

using namespace flotilla;
using nlohmann::json;

namespace {

std::vector<ChatMessage> messages_of(const json& conv) {
  std::vector<ChatMessage> out;
  for (const json& m : conv) {
    ChatMessage msg{m.at("role").get<std::string>(), m.at("content").get<std::string>(), {}};
    if (m.contains("reasoning_content")) msg.reasoning = m.at("reasoning_content").get<std::string>();
    out.push_back(msg);
  }
  return out;
}

}  // namespace

int main() {
  const std::string root = std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/tokenizers";
  const json golden = json::parse(data_test::read_bytes(root + "/golden.json"));
  std::map<std::string, Tokenizer> toks;
  for (const char* name : {"gpt2", "llama3", "qwen", "smollm2"})
    toks.emplace(name, Tokenizer::load(root + "/" + name));

  int text_ok = 0, ids_ok = 0, mask_ok = 0, n = 0;
  for (const json& c : golden.at("chat")) {
    const Tokenizer& tok = toks.at(c.at("tokenizer").get<std::string>());
    ChatFormat format;
    CHECK(parse_chat_format(c.at("format").get<std::string>(), &format));
    const auto msgs = messages_of(golden.at("conversations")[c.at("conversation").get<size_t>()]);
    const std::string label = c.at("tokenizer").get<std::string>() + "/" + c.at("format").get<std::string>() +
                              " conversation " + std::to_string(c.at("conversation").get<int>());
    const std::string text = render_chat_text(format, msgs, tok);
    CHECK_MSG(text == c.at("text").get<std::string>(), "%s text:\n%s\nwant:\n%s", label.c_str(), text.c_str(),
              c.at("text").get<std::string>().c_str());
    const LabeledDocument doc = tokenize_chat(tok, format, msgs);
    const bool ids = doc.ids == c.at("ids").get<std::vector<uint32_t>>();
    const bool mask =
        std::vector<int>(doc.target.begin(), doc.target.end()) == c.at("targets").get<std::vector<int>>();
    CHECK_MSG(ids, "%s ids", label.c_str());
    CHECK_MSG(mask, "%s targets", label.c_str());
    text_ok += text == c.at("text").get<std::string>();
    ids_ok += ids;
    mask_ok += mask;
    ++n;
  }
  std::printf("chat: %d renderings; text %d, ids %d, targets %d exact\n", n, text_ok, ids_ok, mask_ok);
  CHECK(n == 44);

  int comp_ok = 0, m = 0;
  for (const json& c : golden.at("completions")) {
    const Tokenizer& tok = toks.at(c.at("tokenizer").get<std::string>());
    const json& rec = golden.at("prompt_completions")[c.at("record").get<size_t>()];
    const LabeledDocument doc =
        tokenize_completion(tok, ChatFormat::kPlain, rec.at("prompt").get<std::string>(),
                            rec.at("completion").get<std::string>());
    const bool ok =
        doc.ids == c.at("ids").get<std::vector<uint32_t>>() &&
        std::vector<int>(doc.target.begin(), doc.target.end()) == c.at("targets").get<std::vector<int>>();
    CHECK_MSG(ok, "%s completion %d", c.at("tokenizer").get<std::string>().c_str(),
              c.at("record").get<int>());
    comp_ok += ok;
    ++m;
  }
  std::printf("plain: %d prompt/completion records; %d exact (ids and targets)\n", m, comp_ok);
  CHECK(m == 20);

  // Default formats, names, errors.
  CHECK(default_chat_format(toks.at("llama3")) == ChatFormat::kLlama3);
  CHECK(default_chat_format(toks.at("qwen")) == ChatFormat::kQwen3);
  CHECK(default_chat_format(toks.at("smollm2")) == ChatFormat::kChatml);
  CHECK(!default_chat_format(toks.at("gpt2")));
  ChatFormat f;
  CHECK(!parse_chat_format("vicuna", &f));
  CHECK(std::string(chat_format_name(ChatFormat::kQwen3)) == "qwen3");
  CHECK_THROWS(render_chat(ChatFormat::kChatml, {{"tool", "x", {}}}, toks.at("qwen")),
               "messages[0].role \"tool\"");
  CHECK_THROWS(render_chat(ChatFormat::kLlama3, {{"user", "x", {}}}, toks.at("qwen")),
               "needs the token <|start_header_id|>");
  CHECK_THROWS(render_chat(ChatFormat::kChatml, {}, toks.at("qwen")), "messages is empty");
  CHECK_THROWS(render_chat(ChatFormat::kPlain, {{"user", "x", {}}}, toks.at("qwen")),
               "plain is for prompt/completion");

  // A prompt/completion record in a chat format is a user turn and an assistant turn.
  const LabeledDocument as_chat = tokenize_completion(toks.at("llama3"), ChatFormat::kLlama3, "Hi", "Hello!");
  const LabeledDocument chat = tokenize_chat(toks.at("llama3"), ChatFormat::kLlama3,
                                             {{"user", "Hi", {}}, {"assistant", "Hello!", {}}});
  CHECK(as_chat.ids == chat.ids && as_chat.target == chat.target);
  // By hand, Llama 3: <bos> header(user) "Hi" <eot> header(assistant) "Hello!" <eot>: targets are
  // exactly the assistant's tokens and its <|eot_id|>.
  const Tokenizer& llama = toks.at("llama3");
  const uint32_t eot = *llama.token_id("<|eot_id|>");
  CHECK(chat.ids.front() == *llama.bos_id() && chat.ids.back() == eot && chat.target.back() == 1);
  std::string target_text;
  for (size_t i = 0; i < chat.ids.size(); ++i)
    if (chat.target[i]) target_text += llama.token_bytes(chat.ids[i]);
  CHECK_MSG(target_text == "Hello!<|eot_id|>", "%s", target_text.c_str());
  return flotilla_test::summary("data_chat_format");
}
