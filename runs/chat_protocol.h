// The app's side of `flotilla-worker chat` (docs/chat.md): the request lines it writes and the
// event lines it reads, as plain structs, so the Chat page's process plumbing (ui/chat) holds no
// JSON and the protocol is tested without Qt.
//
// Decision: a line that is not a known event parses to kUnknown, never throws: the worker's stdout
// is the only channel, and one odd line (a future event) must not end a conversation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace flotilla::runs {

struct ChatTurn {
  std::string role;  // system, user, assistant
  std::string content;
};

struct ChatOptions {
  int max_tokens = 256;
  double temperature = 0.7;         // 0: greedy
  int top_k = 0;                    // 0: all tokens
  double top_p = 1.0;               // 1: all tokens
  double repetition_penalty = 1.0;  // 1: off
  uint64_t seed = 1;
  std::vector<std::string> stops;  // texts that end the answer
  bool special = false;            // keep special tokens in the text
  bool ignore_eos = false;         // go on past the end of turn / EOS
};

// `chat --checkpoint DIR` or `chat --model NAME` (the worker's arguments after the program).
std::vector<std::string> chat_worker_args(const std::string& checkpoint, const std::string& hf_model);

// One request line each, without the new line.
std::string chat_generate_line(int64_t id, const std::vector<ChatTurn>& messages, const std::string& format,
                               const ChatOptions& options);
std::string chat_cancel_line(int64_t id);
std::string chat_quit_line();

struct ChatEvent {
  enum class Kind { kReady, kStart, kDelta, kDone, kError, kUnknown } kind = Kind::kUnknown;
  int64_t id = -1;   // the request's (-1: ready, or an error about no request)
  std::string text;  // delta: the new text; error: the message
  std::string stop;  // done: end token | stop string | length | cancelled
  std::string format, source, tokenizer, description;  // ready / start
  int64_t step = -1;                                   // ready: -1 for a Hugging Face folder
  int64_t tokens = 0, prompt_tokens = 0;
  int context = 0;
  double tokens_per_s = 0, prefill_ms = 0, seconds = 0;
};
ChatEvent parse_chat_event(const std::string& line);

}  // namespace flotilla::runs
