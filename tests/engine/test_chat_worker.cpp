// The chat playground's server, `flotilla-worker chat`, driven through its pipes as the app drives
// it (docs/chat.md): on a tiny chat model (tests/tools/chat_fixture.h) it says ready with the
// checkpoint's step and the tokenizer's chat format; the deltas of a greedy generation concatenate
// to exactly what `sample --temperature 0` answers, and done says how it ended, with tokens/s; a
// cancel sent mid-generation ends a 100000-token generation within seconds ("cancelled"); bad
// request lines (not JSON, an unknown op, wrong fields, an out-of-range option, an unknown format)
// are answered with error events and the server goes on answering; quit ends it with exit 0. The
// same model exported as a Hugging Face folder answers the same through `chat --model`.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "chat_fixture.h"
#include "check.h"
#include "worker_run.h"

using namespace flotilla_test;
using json = nlohmann::json;

namespace {

// The worker with a pipe on stdin and one on stdout (stderr to a log).
class ChatProcess {
 public:
  ChatProcess(const std::vector<std::string>& args, const std::string& log) {
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 2);
      close(in[1]);
      close(out[0]);
      std::vector<std::string> all = {FLOTILLA_WORKER_PATH, "chat"};
      all.insert(all.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (auto& a : all) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    to_ = in[1];
    from_ = out[0];
  }
  ~ChatProcess() {
    if (to_ >= 0) close(to_);
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      wait_exit(pid_);
    }
    if (from_ >= 0) close(from_);
  }
  void send(const std::string& line) {
    const std::string l = line + "\n";
    if (write(to_, l.data(), l.size()) != static_cast<ssize_t>(l.size())) std::printf("short write\n");
  }
  void send(const json& j) { send(j.dump()); }
  // The next line as JSON ({"event":"timeout"} after `seconds` or at the end of stdout).
  json next(double seconds = 60) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    for (;;) {
      const size_t nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        const std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        const json j = json::parse(line, nullptr, false);
        if (j.is_discarded()) std::printf("not JSON on stdout: [%s]\n", line.c_str());
        return j.is_object() ? j : json{{"event", "not json: " + line}};
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return json{{"event", "timeout"}};
      pollfd p{from_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char chunk[4096];
      const ssize_t n = read(from_, chunk, sizeof chunk);
      if (n <= 0) return json{{"event", "timeout"}};
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }
  // Closes stdin and waits up to 20 s for the exit status (then kills it: -1).
  int finish() {
    close(to_);
    to_ = -1;
    for (int i = 0; i < 200; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      usleep(100000);
    }
    return -1;  // the destructor kills it
  }

 private:
  pid_t pid_ = -1;
  int to_ = -1, from_ = -1;
  bool reaped_ = false;
  std::string buffer_;
};

json generate(int64_t id, const std::string& question, const json& options) {
  return {{"op", "generate"},
          {"id", id},
          {"messages", json::array({{{"role", "user"}, {"content", question}}})},
          {"format", "auto"},
          {"options", options}};
}

struct Answer {
  std::string text;
  json start, done;
  int deltas = 0;
  bool deltas_counted = true;  // each delta's tokens (so far) grows
};

Answer collect(ChatProcess& chat, int64_t id, double seconds = 60) {
  Answer a;
  a.start = a.done = json::object();
  int64_t last_tokens = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (;;) {
    const double left = std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    const json e = left > 0 ? chat.next(left) : json{{"event", "timeout"}};
    if (e["event"] == "timeout") {
      std::printf("no event for %lld\n", static_cast<long long>(id));
      return a;
    }
    if (e.value("id", int64_t{-1}) != id) {
      std::printf("unexpected event %s\n", e.dump().c_str());
      continue;
    }
    const std::string kind = e.value("event", "");
    if (kind == "start") a.start = e;
    if (kind == "delta") {
      a.text += e["text"].get<std::string>();
      ++a.deltas;
      if (e["tokens"].get<int64_t>() < last_tokens) a.deltas_counted = false;
      last_tokens = e["tokens"].get<int64_t>();
    }
    if (kind == "done" || kind == "error") {
      a.done = e;
      return a;
    }
  }
}

}  // namespace

int main() {
  const std::string root = fresh_dir("chat_worker");
  std::string log;
  const std::string run = make_chat_run(root, 160, &log);
  CHECK_MSG(!run.empty(), "%s", log.c_str());
  if (run.empty()) return summary("test_chat_worker");
  const std::string france = chat_fixture_france();

  // The reference: sample's greedy answer (its own tokenizer flag; chat finds the run's).
  const ProcResult sampled =
      run_worker({"sample", "--checkpoint", run, "--tokenizer", chat_fixture_tokenizer(), "--prompt", france,
                  "--temperature", "0", "--json"});
  CHECK_MSG(sampled.exit_code == 0, "sample: %s", sampled.output.c_str());
  json reference;
  for (size_t at = 0; at < sampled.output.size();) {
    const size_t end = sampled.output.find('\n', at);
    const std::string line =
        sampled.output.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (!line.empty() && line[0] == '{') reference = json::parse(line, nullptr, false);
    if (end == std::string::npos) break;
    at = end + 1;
  }
  CHECK_MSG(reference.is_object() && reference["text"] == "The capital of France is Paris.", "%s",
            sampled.output.c_str());
  // Without --tokenizer, sample finds the run's as chat does: the same answer.
  const ProcResult found = run_worker({"sample", "--checkpoint", run, "--prompt", france, "--temperature", "0", "--json"});
  CHECK_MSG(found.exit_code == 0 && found.output.find("\"text\":\"The capital of France is Paris.\"") != std::string::npos &&
                found.output.find("(the run's)") != std::string::npos,
            "sample without --tokenizer: %s", found.output.c_str());

  ChatProcess chat({"--checkpoint", run}, root + "/chat.err");
  const json ready = chat.next(120);
  CHECK_MSG(ready.value("event", "") == "ready" && ready.value("step", 0) == 160 &&
                ready.value("format", "") == "chatml" && ready.value("context", 0) == 64,
            "ready: %s (stderr %s)", ready.dump().c_str(), read_file(root + "/chat.err").c_str());

  // Bad lines: each an error event; the server goes on.
  chat.send(std::string("this is not json"));
  json e = chat.next();
  CHECK_MSG(e.value("event", "") == "error" && !e.contains("id"), "%s", e.dump().c_str());
  chat.send(json{{"op", "frobnicate"}, {"id", 4}});
  e = chat.next();
  CHECK_MSG(e.value("event", "") == "error" && e.value("id", 0) == 4 &&
                e.value("message", "").find("frobnicate") != std::string::npos,
            "%s", e.dump().c_str());
  chat.send(json{{"op", "generate"}, {"id", 5}, {"messages", "hello"}});
  e = chat.next();
  CHECK_MSG(e.value("event", "") == "error" && e.value("id", 0) == 5, "%s", e.dump().c_str());
  chat.send(generate(6, france, {{"temperature", -1}}));
  e = chat.next();
  CHECK_MSG(e.value("event", "") == "error" && e.value("id", 0) == 6 &&
                e.value("message", "").find("temperature") != std::string::npos,
            "%s", e.dump().c_str());
  chat.send(generate(7, france, {{"tempreature", 0}}));
  e = chat.next();
  CHECK_MSG(
      e.value("event", "") == "error" && e.value("message", "").find("tempreature") != std::string::npos,
      "%s", e.dump().c_str());
  json unknown_format = generate(8, france, json::object());
  unknown_format["format"] = "vicuna";
  chat.send(unknown_format);
  e = chat.next();
  CHECK_MSG(e.value("event", "") == "error" && e.value("id", 0) == 8, "%s", e.dump().c_str());
  chat.send(json{{"op", "cancel"}});
  e = chat.next();
  CHECK_MSG(e.value("event", "") == "error", "%s", e.dump().c_str());

  // Greedy: the streamed deltas are sample's answer; it ends at <|im_end|>.
  chat.send(generate(1, france, {{"temperature", 0}, {"max_tokens", 64}}));
  Answer a = collect(chat, 1);
  CHECK_MSG(a.start.value("format", "") == "chatml" &&
                a.start.value("prompt_tokens", size_t{0}) == reference["prompt_ids"].size(),
            "start: %s", a.start.dump().c_str());
  CHECK_MSG(a.text == reference["text"].get<std::string>(), "chat answered [%s], sample [%s]", a.text.c_str(),
            reference["text"].get<std::string>().c_str());
  CHECK_MSG(a.deltas > 1 && a.deltas_counted, "%d deltas", a.deltas);
  CHECK_MSG(a.done.value("event", "") == "done" && a.done.value("stop", "") == "end token" &&
                a.done.value("tokens", size_t{0}) == reference["ids"].size() &&
                a.done.value("tokens_per_s", 0.0) > 0 && a.done.contains("prefill_ms"),
            "done: %s", a.done.dump().c_str());

  // A stop string cuts the answer before it; the repeated request gives the same answer.
  chat.send(generate(2, france, {{"temperature", 0}, {"stop", {" is"}}}));
  a = collect(chat, 2);
  CHECK_MSG(a.text == "The capital of France" && a.done.value("stop", "") == "stop string", "[%s] %s",
            a.text.c_str(), a.done.dump().c_str());

  // Cancel mid-generation: 100000 tokens asked, every token shown (special, no end token).
  chat.send(generate(
      3, france, {{"temperature", 1.0}, {"max_tokens", 100000}, {"ignore_eos", true}, {"special", true}}));
  const auto asked = std::chrono::steady_clock::now();
  json first;
  do {
    first = chat.next(30);
  } while (first["event"] != "delta" && first["event"] != "timeout");
  CHECK_MSG(first.value("event", "") == "delta", "no delta before the cancel: %s", first.dump().c_str());
  chat.send(json{{"op", "cancel"}, {"id", 3}});
  a = collect(chat, 3, 30);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - asked).count();
  CHECK_MSG(a.done.value("stop", "") == "cancelled" && a.done.value("tokens", 100000) < 100000 && took < 20,
            "cancel: %s after %.1f s", a.done.dump().c_str(), took);

  // Still serving: the greedy answer again, then quit.
  chat.send(generate(9, france, {{"temperature", 0}}));
  a = collect(chat, 9);
  CHECK_MSG(a.text == "The capital of France is Paris.", "after the cancel: [%s]", a.text.c_str());
  chat.send(json{{"op", "quit"}});
  CHECK_MSG(chat.finish() == 0, "chat did not exit 0 on quit: %s", read_file(root + "/chat.err").c_str());

  // The same model as a Hugging Face folder (export --format hf, with its tokenizer): `--model`
  // loads it and its tokenizer, and it answers as the checkpoint does.
  const ProcResult exported = run_worker({"export", "--checkpoint", run, "--format", "hf", "--out",
                                          root + "/hf", "--tokenizer", chat_fixture_tokenizer()});
  CHECK_MSG(exported.exit_code == 0, "export: %s", exported.output.c_str());
  {
    ChatProcess hf({"--model", root + "/hf"}, root + "/hf.err");
    const json r = hf.next(120);
    CHECK_MSG(
        r.value("event", "") == "ready" && r.value("step", 0) == -1 && r.value("format", "") == "chatml",
        "hf ready: %s (stderr %s)", r.dump().c_str(), read_file(root + "/hf.err").c_str());
    hf.send(generate(1, france, {{"temperature", 0}, {"max_tokens", 64}}));
    const Answer h = collect(hf, 1);
    CHECK_MSG(h.text == reference["text"].get<std::string>() && h.done.value("stop", "") == "end token",
              "hf answered [%s] %s", h.text.c_str(), h.done.dump().c_str());
    hf.send(json{{"op", "quit"}});
    CHECK(hf.finish() == 0);
  }

  // No tokenizer to be found and none given: refused at start with a reason (exit 2).
  const ProcResult none = run_worker({"chat", "--checkpoint", root + "/nowhere"});
  CHECK_MSG(none.exit_code != 0, "%s", none.output.c_str());

  std::printf("chat worker: ready, greedy deltas = sample's answer, stop string, cancel, bad lines, quit\n");
  return summary("test_chat_worker");
}
