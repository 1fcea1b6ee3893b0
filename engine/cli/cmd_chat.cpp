// flotilla-worker chat (--checkpoint DIR | --model HF_DIR) [--tokenizer TOK]
//
// The chat playground's server (docs/chat.md): the model is loaded once, then JSON lines on stdin
// ask for generations and JSON lines on stdout stream them back (ready, start, delta, done, error).
//
// Decisions:
// - A reader thread owns stdin; the generating thread owns the model. A cancel (or quit, or the end
//   of stdin) read while a generation runs sets a flag the token callback checks, so Stop lands
//   within one token instead of after the answer. Every line out goes through one mutex, whole.
// - The answer is shown as `sample` shows it, cut into deltas by AnswerStream (chat_stream.h): each
//   delta whole UTF-8 characters, stop strings held back, the deltas concatenating to the answer.
// - A bad request line is answered with an error event (with its id when it has one) and the
//   server goes on: the app must never lose its loaded model to a typo.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "engine/cli/args.h"
#include "engine/cli/chat_stream.h"
#include "engine/cli/commands.h"
#include "engine/core/error.h"
#include "engine/data/chat_format.h"
#include "engine/infer/generate.h"
#include "engine/infer/load.h"
#include "engine/tokenizer/bpe.h"

namespace flotilla::cli {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Request {
  int64_t id = 0;
  std::vector<ChatMessage> messages;
  std::string format = "auto";
  infer::GenerateOptions options;
  std::vector<std::string> stops;
  bool special = false;
  bool ignore_eos = false;
};

class Output {
 public:
  void emit(const json& line) {
    const std::string text = line.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
    std::lock_guard<std::mutex> lock(mutex_);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  }
  void error(const std::string& message, std::optional<int64_t> id = std::nullopt) {
    json j;
    if (id) j["id"] = *id;
    j["event"] = "error";
    j["message"] = message;
    emit(j);
  }

 private:
  std::mutex mutex_;
};

// The requests read so far and the flags the reader sets for the generating thread.
struct Inbox {
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<Request> queue;
  bool closed = false;              // quit, or the end of stdin
  int64_t running = -1;             // the id being generated (-1: none)
  std::atomic<bool> cancel{false};  // stop the running generation after its current token
};

std::optional<int64_t> request_id(const json& j) {
  if (!j.is_object() || !j.contains("id")) return std::nullopt;
  if (!j["id"].is_number_integer()) return std::nullopt;
  return j["id"].get<int64_t>();
}

// Throws std::runtime_error with what is wrong with the request.
Request parse_generate(const json& j) {
  Request r;
  const auto id = request_id(j);
  if (!id) throw std::runtime_error("generate needs an integer \"id\"");
  r.id = *id;
  if (!j.contains("messages") || !j["messages"].is_array())
    throw std::runtime_error("generate needs \"messages\": a list of {\"role\", \"content\"}");
  for (const json& m : j["messages"]) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string())
      throw std::runtime_error("each message needs a \"role\" and a \"content\" (strings)");
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant")
      throw std::runtime_error("a message's role is system, user or assistant, not '" + role + "'");
    r.messages.push_back({role, m["content"].get<std::string>(), {}});
  }
  if (j.contains("format")) {
    if (!j["format"].is_string()) throw std::runtime_error("\"format\" is a string");
    r.format = j["format"].get<std::string>();
    ChatFormat f{};
    if (r.format != "auto" && !parse_chat_format(r.format, &f))
      throw std::runtime_error("\"format\" is auto, llama3, chatml, qwen3 or plain, not '" + r.format + "'");
  }
  infer::GenerateOptions& o = r.options;
  o.max_tokens = 256;
  o.temperature = 0.7f;
  const json options = j.value("options", json::object());
  if (!options.is_object()) throw std::runtime_error("\"options\" is an object");
  for (auto it = options.begin(); it != options.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    const auto number = [&]() {
      if (!v.is_number()) throw std::runtime_error("option \"" + k + "\" is a number");
      return v.get<double>();
    };
    if (k == "max_tokens") {
      const double n = number();
      if (!v.is_number_integer() || n < 1 || n > 100000)
        throw std::runtime_error("max_tokens is a whole number from 1 to 100000");
      o.max_tokens = static_cast<int>(n);
    } else if (k == "temperature") {
      o.temperature = static_cast<float>(number());
      if (!(o.temperature >= 0)) throw std::runtime_error("temperature is 0 (greedy) or more");
    } else if (k == "top_k") {
      const double n = number();
      if (!v.is_number_integer() || n < 0)
        throw std::runtime_error("top_k is a whole number, 0 (all) or more");
      o.top_k = static_cast<int>(std::min(n, 1e9));
    } else if (k == "top_p") {
      o.top_p = static_cast<float>(number());
      if (!(o.top_p > 0 && o.top_p <= 1)) throw std::runtime_error("top_p is above 0 and at most 1");
    } else if (k == "repetition_penalty") {
      o.repetition_penalty = static_cast<float>(number());
      if (!(o.repetition_penalty > 0)) throw std::runtime_error("repetition_penalty is above 0 (1: off)");
    } else if (k == "seed") {
      if (!v.is_number_integer() || number() < 0)
        throw std::runtime_error("seed is a whole number, 0 or more");
      o.seed = v.get<uint64_t>();
    } else if (k == "stop") {
      if (!v.is_array()) throw std::runtime_error("stop is a list of texts");
      for (const json& s : v) {
        if (!s.is_string() || s.get<std::string>().empty())
          throw std::runtime_error("each stop is a non-empty text");
        r.stops.push_back(s.get<std::string>());
      }
    } else if (k == "special" || k == "ignore_eos") {
      if (!v.is_boolean()) throw std::runtime_error("option \"" + k + "\" is true or false");
      (k == "special" ? r.special : r.ignore_eos) = v.get<bool>();
    } else {
      throw std::runtime_error("unknown option \"" + k +
                               "\" (max_tokens, temperature, top_k, top_p, repetition_penalty, seed, stop, "
                               "special, ignore_eos)");
    }
  }
  return r;
}

// stdin, line by line, until quit or its end.
void read_requests(Inbox& inbox, Output& out) {
  std::string line;
  while (std::getline(std::cin, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      out.error("not a JSON object: " + line.substr(0, 200));
      continue;
    }
    const std::string op = j.contains("op") && j["op"].is_string() ? j["op"].get<std::string>() : "";
    if (op == "generate") {
      try {
        Request r = parse_generate(j);
        std::lock_guard<std::mutex> lock(inbox.mutex);
        inbox.queue.push_back(std::move(r));
        inbox.wake.notify_all();
      } catch (const std::exception& e) {
        out.error(e.what(), request_id(j));
      }
    } else if (op == "cancel") {
      const auto id = request_id(j);
      if (!id) {
        out.error("cancel needs the integer \"id\" of a generation");
        continue;
      }
      std::lock_guard<std::mutex> lock(inbox.mutex);
      if (inbox.running == *id) {
        inbox.cancel = true;
        continue;
      }
      const auto queued =
          std::find_if(inbox.queue.begin(), inbox.queue.end(), [&](const Request& r) { return r.id == *id; });
      if (queued != inbox.queue.end()) {
        inbox.queue.erase(queued);
        out.emit({{"id", *id}, {"event", "done"}, {"stop", "cancelled"}, {"tokens", 0}});
      }  // else: it ended already (its done is out or on its way); nothing to do
    } else if (op == "quit") {
      break;
    } else {
      out.error(op.empty() ? std::string("a request needs \"op\": generate, cancel or quit")
                           : "unknown op '" + op + "' (generate, cancel, quit)",
                request_id(j));
    }
  }
  std::lock_guard<std::mutex> lock(inbox.mutex);
  inbox.closed = true;
  inbox.cancel = true;
  inbox.queue.clear();
  inbox.wake.notify_all();
}

class Chat {
 public:
  Chat(infer::LoadedModel loaded, Tokenizer tok, std::optional<ChatFormat> auto_format, Output& out)
      : loaded_(std::move(loaded)), tok_(std::move(tok)), auto_format_(auto_format), out_(out) {}

  void run(const Request& r, std::atomic<bool>& cancel) {
    std::optional<ChatFormat> format = auto_format_;
    if (r.format != "auto") {
      ChatFormat f{};
      parse_chat_format(r.format, &f);
      format = f;
    }
    if (format == ChatFormat::kPlain) format.reset();
    std::vector<int32_t> prompt;
    if (format && !r.messages.empty()) {
      for (uint32_t id : chat_prompt_ids(tok_, *format, r.messages))
        prompt.push_back(static_cast<int32_t>(id));
    } else {
      // Plain: the messages' texts continued as one text (a lone message: `sample --chat off`).
      std::string text;
      for (const ChatMessage& m : r.messages) text += (text.empty() ? "" : "\n") + m.content;
      if (!text.empty()) {
        const std::vector<uint32_t> ids =
            tok_.origin() == "tokenizer.json" ? tok_.encode_model_input(text) : tok_.encode(text);
        for (uint32_t id : ids) prompt.push_back(static_cast<int32_t>(id));
      }
    }
    if (prompt.empty()) prompt.push_back(static_cast<int32_t>(tok_.bos_id().value_or(tok_.eot_id())));
    infer::GenerateOptions o = r.options;
    if (!r.ignore_eos)
      for (uint32_t id : stop_token_ids(tok_, format)) o.stop_ids.push_back(static_cast<int32_t>(id));
    const int context = loaded_.model->dims().max_seq_len;
    out_.emit({{"id", r.id},
               {"event", "start"},
               {"prompt_tokens", prompt.size()},
               {"context", context},
               {"format", format ? chat_format_name(*format) : "plain"}});

    AnswerStream answer(tok_, r.stops, r.special);
    int64_t count = 0;
    bool cancelled = false;
    const Clock::time_point begin = Clock::now();
    Clock::time_point first = begin, last = begin;
    const auto rate = [&]() {
      const double s = std::chrono::duration<double>(last - first).count();
      return count > 1 && s > 0 ? static_cast<double>(count - 1) / s : 0.0;
    };
    const auto send = [&](const std::string& text) {
      if (!text.empty())
        out_.emit(
            {{"id", r.id}, {"event", "delta"}, {"text", text}, {"tokens", count}, {"tokens_per_s", rate()}});
    };
    const auto on_token = [&](size_t, int32_t id) {
      last = Clock::now();
      if (++count == 1) first = last;
      send(answer.add(id, std::find(o.stop_ids.begin(), o.stop_ids.end(), id) != o.stop_ids.end()));
      if (cancel) cancelled = true;
      return !answer.stopped() && !cancelled;
    };
    const std::vector<infer::Generation> g = infer::generate(*loaded_.model, {prompt}, o, on_token);
    send(answer.flush());  // a held tail (the token limit, a cancel): it is the answer too
    const bool stop_string = answer.stopped();
    const char* stop = stop_string                                 ? "stop string"
                       : cancelled                                 ? "cancelled"
                       : g[0].stop == infer::StopReason::kEndToken ? "end token"
                                                                   : "length";
    out_.emit(
        {{"id", r.id},
         {"event", "done"},
         {"stop", stop},
         {"tokens", count},
         {"prefill_ms", count > 0 ? std::chrono::duration<double, std::milli>(first - begin).count() : 0.0},
         {"tokens_per_s", rate()},
         {"seconds", std::chrono::duration<double>(Clock::now() - begin).count()}});
  }

 private:
  infer::LoadedModel loaded_;
  Tokenizer tok_;
  std::optional<ChatFormat> auto_format_;
  Output& out_;
};

}  // namespace

int cmd_chat(const CommandArgs& argv) {
  Args args(argv);
  if (args.flag("--help")) {
    std::printf(
        "Usage: flotilla-worker chat (--checkpoint DIR | --model HF_DIR) [--tokenizer TOK]\n\n"
        "The chat playground's server: loads the model once (a checkpoint: a step-N, checkpoints or\n"
        "run folder, its tokenizer the run's; or a Hugging Face folder or Hub name, with its\n"
        "tokenizer), prints a ready line, then reads JSON requests on stdin, one a line, and streams\n"
        "JSON events on stdout, one a line (docs/chat.md):\n\n"
        "  {\"op\":\"generate\",\"id\":1,\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\n"
        "   \"format\":\"auto\",\"options\":{\"max_tokens\":256,\"temperature\":0.7,\"top_k\":0,\n"
        "   \"top_p\":1,\"repetition_penalty\":1,\"seed\":1,\"stop\":[\"...\"]}}\n"
        "  {\"op\":\"cancel\",\"id\":1}    {\"op\":\"quit\"}\n\n"
        "Events: ready, start (prompt_tokens, format), delta (text, tokens so far, tokens_per_s),\n"
        "done (stop: end token | stop string | length | cancelled; tokens, prefill_ms,\n"
        "tokens_per_s), error (message; id when the request had one). Formats: auto (the\n"
        "tokenizer's chat format, else plain), llama3, chatml, qwen3, plain (the messages' texts\n"
        "continued as one text). The end of stdin ends the server as quit does.\n");
    return 0;
  }
  infer::LoadRequest load;
  load.checkpoint = args.value_or("--checkpoint", "");
  load.hf_model = args.value_or("--model", "");
  const std::string tokenizer_flag = args.value_or("--tokenizer", "");
  args.finish("chat");

  infer::LoadedModel loaded = infer::load_for_inference(load);
  for (const std::string& w : loaded.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  std::fprintf(stderr, "%s\n", loaded.description.c_str());
  const std::string tokenizer_path = tokenizer_flag.empty() ? loaded.tokenizer : tokenizer_flag;
  if (tokenizer_path.empty())
    throw Error(ExitCode::kUsage, "no tokenizer found for " + loaded.source +
                                      " (a run on token ids, such as the synthetic demo, cannot chat): give "
                                      "--tokenizer");
  Tokenizer tok = Tokenizer::load(tokenizer_path);
  const int vocab = loaded.model->dims().vocab_size;
  if (tok.vocab_size() > vocab)
    throw Error(ExitCode::kUsage, "the tokenizer " + tokenizer_path + " has " +
                                      std::to_string(tok.vocab_size()) + " tokens but the model only " +
                                      std::to_string(vocab) +
                                      ": give the tokenizer the model was trained with");
  const std::optional<ChatFormat> auto_format = tokenizer_chat_format(tokenizer_path, tok);

  Output out;
  out.emit({{"event", "ready"},
            {"source", loaded.source},
            {"step", loaded.step},
            {"tokenizer", tokenizer_path},
            {"format", auto_format ? chat_format_name(*auto_format) : "plain"},
            {"description", loaded.description},
            {"context", loaded.model->dims().max_seq_len}});
  Chat chat(std::move(loaded), std::move(tok), auto_format, out);
  Inbox inbox;
  std::thread reader([&] { read_requests(inbox, out); });
  for (;;) {
    Request r;
    {
      std::unique_lock<std::mutex> lock(inbox.mutex);
      inbox.wake.wait(lock, [&] { return inbox.closed || !inbox.queue.empty(); });
      if (inbox.queue.empty()) break;  // closed
      r = std::move(inbox.queue.front());
      inbox.queue.pop_front();
      inbox.running = r.id;
      inbox.cancel = false;
    }
    try {
      chat.run(r, inbox.cancel);
    } catch (const std::exception& e) {  // e.g. a format whose special tokens the tokenizer lacks
      out.error(e.what(), r.id);
    }
    std::lock_guard<std::mutex> lock(inbox.mutex);
    inbox.running = -1;
  }
  reader.join();
  return 0;
}

}  // namespace flotilla::cli
