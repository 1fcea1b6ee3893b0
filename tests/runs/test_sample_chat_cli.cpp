// `flotilla runs sample` on a chat-tuned run (issue 34 #6): the command the app's Sample dialog
// runs (runs::sample_worker_args). A tiny Llama is trained with `flotilla run` on ChatML
// conversations prepared with the golden SmolLM2 tokenizer (left beside the shards, with its chat
// template); `runs sample --prompt QUESTION --temperature 0` prints the answer alone, ending at the
// end of the assistant's turn, where it printed the prompt and a continuation padded with
// <|im_end|> to 64 tokens. --chat off continues the text instead.
#include <cstdio>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "check.h"
#include "worker_run.h"

using namespace flotilla_test;
namespace fs = std::filesystem;

namespace {

std::string g_root;
int g_calls = 0;

// stdout and stderr apart: the answer is stdout.
ProcResult cli(const std::vector<std::string>& args, std::string* out = nullptr) {
  const std::string log = g_root + "/cli" + std::to_string(++g_calls);
  std::vector<std::string> argv = {
      "/bin/sh",           "-c", "cd \"$0\" && exec \"$@\" 2>\"$0/err\"", g_root, FLOTILLA_CLI_PATH, "--db",
      g_root + "/store.db"};
  argv.insert(argv.end(), args.begin(), args.end());
  ProcResult r;
  r.exit_code = wait_exit(spawn(
      argv,
      {"OMP_NUM_THREADS=2", "DISPLAY=", "WAYLAND_DISPLAY=", "QT_QPA_PLATFORM=", "FLOTILLA_PEAK_FLOPS=1e11"},
      log));
  if (out) *out = read_file(log);
  r.output = read_file(log) + read_file(g_root + "/err");
  return r;
}

}  // namespace

int main() {
  g_root = fresh_dir("sample_chat_cli");
  const std::string tok = std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/tokenizers/smollm2";
  std::string chats;
  for (int i = 0; i < 200; ++i) {
    const bool france = i % 2 == 0;
    chats +=
        nlohmann::json(
            {{"messages",
              {{{"role", "user"},
                {"content", france ? "What is the capital of France?" : "What is the capital of Japan?"}},
               {{"role", "assistant"},
                {"content",
                 france ? "The capital of France is Paris." : "The capital of Japan is Tokyo."}}}}})
            .dump() +
        "\n";
  }
  write_text(g_root + "/chats.jsonl", chats);
  const auto prep = run_worker({"data", "prepare", "--input", g_root + "/chats.jsonl", "--tokenizer", tok,
                                "--out", g_root + "/data", "--val-fraction", "0"});
  CHECK_MSG(prep.exit_code == 0, "%s", prep.output.c_str());
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(tok + "/" + f, g_root + "/data/" + f);
  write_text(g_root + "/chat.toml",
             "[run]\nname = \"chat\"\nseed = 3\nthreads = 2\n"
             "[model]\npreset = \"custom\"\narch = \"llama\"\nn_layer = 2\nn_head = 4\nn_kv_head = 2\n"
             "n_embd = 64\nffn_dim = 128\nvocab_size = 600\nmax_seq_len = 64\n"
             "[data]\nsource = \"shards\"\ntrain = \"" +
                 g_root +
                 "/data/train_*.bin\"\n"
                 "[train]\nsteps = 160\nmicro_batch = 4\nseq_len = 64\n"
                 "[optim]\nlr = 0.01\nwarmup_steps = 10\n"
                 "[checkpoint]\nevery = 0\n[eval]\nevery = 0\n");
  const ProcResult trained = cli({"run", g_root + "/chat.toml", "--quiet"});
  CHECK_MSG(trained.exit_code == 0, "%s", trained.output.c_str());

  std::string out;
  const ProcResult s = cli(
      {"runs", "sample", "chat", "--prompt", "What is the capital of France?", "--temperature", "0"}, &out);
  CHECK_MSG(s.exit_code == 0 && out == "The capital of France is Paris.\n", "exit %d, stdout [%s]\n%s",
            s.exit_code, out.c_str(), s.output.c_str());
  CHECK_MSG(s.output.find("chat format chatml") != std::string::npos &&
                s.output.find("stopped at <|im_end|>") != std::string::npos,
            "%s", s.output.c_str());
  // --chat off: a plain continuation of the question, not an answer in the assistant's turn.
  const ProcResult plain = cli({"runs", "sample", "chat", "--prompt", "What is the capital of France?",
                                "--temperature", "0", "--chat", "off", "--tokens", "8"},
                               &out);
  CHECK_MSG(plain.exit_code == 0 && plain.output.find("chat format") == std::string::npos, "%s",
            plain.output.c_str());
  std::printf("runs sample on a chat run: the answer alone, ending at <|im_end|>\n");
  return flotilla_test::summary("test_sample_chat_cli");
}
