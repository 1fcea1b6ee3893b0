// A tiny chat model for the chat playground's tests (the worker's `chat` protocol, the app's Chat
// page): a 2-layer Llama trained on ChatML conversations with the golden SmolLM2 tokenizer (its
// tokenizer_config.json has a chat template), the tokenizer beside the shards as the app's Data
// page leaves it, so the checkpoint finds it (run_tokenizer_path) and `chat --checkpoint` needs no
// --tokenizer. Trained enough to answer its two questions, so a greedy answer is a known sentence
// that ends at <|im_end|>.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "worker_run.h"

namespace flotilla_test {

inline const char* chat_fixture_france() { return "What is the capital of France?"; }
inline const char* chat_fixture_japan() { return "What is the capital of Japan?"; }
inline std::string chat_fixture_tokenizer() {
  return std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/tokenizers/smollm2";
}

// Trains the model under `root` (steps: how long; fewer gives an earlier, worse checkpoint) and
// returns the run folder; "" (with `log` set) when a worker command failed.
inline std::string make_chat_run(const std::string& root, int steps, std::string* log,
                                 const std::string& name = "run") {
  namespace fs = std::filesystem;
  const std::string tok_dir = chat_fixture_tokenizer();
  if (!fs::exists(root + "/data/train_000000.bin") && !fs::exists(root + "/data/tokenizer.json")) {
    std::string chats;
    for (int i = 0; i < 200; ++i) {
      const bool france = i % 2 == 0;
      const nlohmann::json rec = {
          {"messages",
           {{{"role", "user"}, {"content", france ? chat_fixture_france() : chat_fixture_japan()}},
            {{"role", "assistant"},
             {"content", france ? "The capital of France is Paris." : "The capital of Japan is Tokyo."}}}}};
      chats += rec.dump() + "\n";
    }
    write_text(root + "/chats.jsonl", chats);
    const ProcResult prep = run_worker({"data", "prepare", "--input", root + "/chats.jsonl", "--tokenizer",
                                        tok_dir, "--out", root + "/data", "--val-fraction", "0"});
    if (prep.exit_code != 0) {
      if (log) *log = "data prepare: " + prep.output;
      return {};
    }
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      fs::copy_file(tok_dir + "/" + f, root + "/data/" + f, fs::copy_options::overwrite_existing);
  }
  const std::string config =
      "[run]\nname = \"chat\"\nseed = 3\nthreads = 2\n"
      "[model]\npreset = \"custom\"\narch = \"llama\"\nn_layer = 2\nn_head = 4\nn_kv_head = 2\n"
      "n_embd = 64\nffn_dim = 128\nvocab_size = 600\nmax_seq_len = 64\n"
      "[data]\nsource = \"shards\"\ntrain = \"" +
      root + "/data/train_*.bin\"\n[train]\nsteps = " + std::to_string(steps) +
      "\nmicro_batch = 4\nseq_len = 64\n[optim]\nlr = 0.01\nwarmup_steps = 10\n"
      "[checkpoint]\nevery = 0\n[eval]\nevery = 0\n";
  write_text(root + "/" + name + ".toml", config);
  const std::string run = root + "/" + name;
  const ProcResult trained =
      run_worker({"train", "--config", root + "/" + name + ".toml", "--out-dir", run, "--quiet"},
                 {"OMP_NUM_THREADS=2", "FLOTILLA_PEAK_FLOPS=1e11"});
  if (trained.exit_code != 0) {
    if (log) *log = "train: " + trained.output;
    return {};
  }
  return run;
}

}  // namespace flotilla_test
