// Chat and completion records -> token ids with per-token loss targets, in the documented chat
// format of each model family (docs/data.md "Chat formats": llama3, chatml, qwen3, plain).
//
// One non-obvious decision: a conversation is rendered to one string and tokenized *once*, as
// transformers' apply_chat_template does, and the loss mask comes from byte offsets: a token is a
// target when its bytes overlap an assistant span (transformers' assistant-mask rule). Tokenizing
// the turns separately would be simpler but can give different ids where a merge crosses a turn
// boundary ("\n" + "\nHello"), i.e. not the ids the model will see at inference.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/bpe.h"

namespace flotilla {

enum class ChatFormat { kLlama3, kChatml, kQwen3, kPlain };

// "llama3", "chatml", "qwen3", "plain"; false for another name.
bool parse_chat_format(std::string_view name, ChatFormat* out);
const char* chat_format_name(ChatFormat format);
// The format a tokenizer's special tokens imply: <|start_header_id|> -> llama3; <|im_start|> with
// <think> -> qwen3; <|im_start|> -> chatml; nullopt when none of these is present.
std::optional<ChatFormat> default_chat_format(const Tokenizer& tokenizer);

struct ChatMessage {
  std::string role;                      // system, user or assistant
  std::string content;                   // the text
  std::optional<std::string> reasoning;  // qwen3: reasoning_content
};

// A run of rendered text; `target` when the loss is taken on it (assistant turns).
struct ChatSegment {
  std::string text;
  bool target = false;
};

// A tokenized training document: target[i] = 1 when the loss counts on predicting ids[i] from the
// tokens before it (target[0] is never used: nothing precedes a document's first token).
struct LabeledDocument {
  std::vector<uint32_t> ids;
  std::vector<uint8_t> target;
  int64_t target_count() const;
};

// Renders a conversation (not plain). Throws Error(kData) for an unknown role, an empty
// conversation, or a tokenizer lacking the format's special tokens (naming them).
std::vector<ChatSegment> render_chat(ChatFormat format, const std::vector<ChatMessage>& messages,
                                     const Tokenizer& tokenizer);
// The rendered text alone (what apply_chat_template(tokenize=False) gives).
std::string render_chat_text(ChatFormat format, const std::vector<ChatMessage>& messages,
                             const Tokenizer& tokenizer);

// Inference (the worker's `sample`): the conversation as render_chat writes it for training,
// followed by the format's generation prompt (apply_chat_template(add_generation_prompt=True)):
// "<|im_start|>assistant\n" (chatml, qwen3) or "<|start_header_id|>assistant<|end_header_id|>\n\n"
// (llama3). Tokenized as training tokenizes a conversation, so the model sees the ids it was
// trained on.
std::vector<uint32_t> chat_prompt_ids(const Tokenizer& tokenizer, ChatFormat format,
                                      const std::vector<ChatMessage>& messages);
// The ids that end a generation: the format's end of turn (<|im_end|>, <|eot_id|>; none for plain
// or no format) and the tokenizer's end of text (EOS, <|endoftext|>), each once.
std::vector<uint32_t> stop_token_ids(const Tokenizer& tokenizer, std::optional<ChatFormat> format);
// The chat format of a run's tokenizer (`path`: its folder or file, as Tokenizer::load takes it),
// when it is a chat model: its folder holds a chat template (chat_template.jinja, or a
// "chat_template" in tokenizer_config.json) and the tokenizer has one of our formats' special
// tokens (default_chat_format). nullopt for a base model's tokenizer, ours, or GPT-2's.
std::optional<ChatFormat> tokenizer_chat_format(const std::string& path, const Tokenizer& tokenizer);
// Whether the folder of `path` holds a chat template (the first half of tokenizer_chat_format).
bool has_chat_template(const std::string& path);

// Tokenizes segments as one text (special tokens matched, no post-processor), marking the tokens
// that overlap target segments.
LabeledDocument tokenize_segments(const Tokenizer& tokenizer, const std::vector<ChatSegment>& segments);
LabeledDocument tokenize_chat(const Tokenizer& tokenizer, ChatFormat format,
                              const std::vector<ChatMessage>& messages);
// plain: tokenizer(prompt + completion) with the post-processor's tokens, then EOS unless it is
// already last; targets are the tokens overlapping the completion, and EOS. Another format: the
// record as a user turn and an assistant turn. Throws Error(kData) when the tokenizer has no EOS.
LabeledDocument tokenize_completion(const Tokenizer& tokenizer, ChatFormat format, std::string_view prompt,
                                    std::string_view completion);
// A text document for labeled shards: what raw-text preparation writes for it, every token a target.
LabeledDocument tokenize_text_document(const Tokenizer& tokenizer, std::string_view text);
// The ids raw-text preparation writes for one document: our formats and GPT-2 files put
// <|endoftext|> first (llm.c); a tokenizer.json gives tokenizer(text) followed by EOS.
void append_text_document(const Tokenizer& tokenizer, std::string_view text, std::vector<uint32_t>& out);

}  // namespace flotilla
