// RELIABILITY A8 and A9: sizes given by a config or a file are bounded before anything is sized by
// them. Before the fix the memory preflight itself exhausted memory: `plan` with model.n_embd = 2^30
// grew to 12.6 GB in 40 s (the parameter layout built one run per row per layer), an HF config.json
// with a million layers took 3 GB, and a 19 KB tokenizer.json with one id of 2^26 took 2.2 GB. Here
// each real worker command runs under RLIMIT_AS 4 GiB (so a regression fails fast rather than taking
// the machine) and must refuse with its exit code and message, within seconds, at a small peak RSS.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "check.h"
#include "worker_run.h"

using namespace flotilla_test;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Bounded {
  int exit_code = -1;
  std::string output;
  double seconds = 0;
  uint64_t peak_rss = 0;
};

Bounded run_bounded(const std::vector<std::string>& args) {
  static int n = 0;
  const std::string log = std::string(FLOTILLA_TEST_TMP) + "/hostile-sizes-" + std::to_string(getpid()) +
                          "-" + std::to_string(n++) + ".log";
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    putenv(const_cast<char*>("FLOTILLA_PEAK_FLOPS=1e11"));
    const rlim_t cap = rlim_t{4} << 30;
    rlimit rl{cap, cap};
    if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(126);
    std::vector<char*> argv = {const_cast<char*>(FLOTILLA_WORKER_PATH)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  int status = 0;
  rusage usage{};
  wait4(pid, &status, 0, &usage);
  Bounded b;
  b.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  b.peak_rss = static_cast<uint64_t>(usage.ru_maxrss) * 1024;
  b.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  b.output = read_file(log);
  return b;
}

// One hostile command: the expected exit code and text, under 10 s and 256 MiB.
void expect_refusal(const std::string& what, const std::vector<std::string>& args, int code,
                    const std::string& text) {
  const Bounded b = run_bounded(args);
  std::printf("%s: exit %d in %.2f s, peak RSS %.1f MiB\n", what.c_str(), b.exit_code, b.seconds,
              static_cast<double>(b.peak_rss) / 1048576.0);
  CHECK_MSG(b.exit_code == code && b.output.find(text) != std::string::npos,
            "%s: exit %d (want %d with \"%s\"):\n%s", what.c_str(), b.exit_code, code, text.c_str(),
            b.output.c_str());
  CHECK_MSG(b.seconds < 10.0, "%s took %.1f s", what.c_str(), b.seconds);
  CHECK_MSG(b.peak_rss < (uint64_t{256} << 20), "%s peaked at %.1f MiB", what.c_str(),
            static_cast<double>(b.peak_rss) / 1048576.0);
}

const char* kBase = R"(
[run]
threads = 1
[model]
preset = "tiny"
vocab_size = 512
max_seq_len = 256
[data]
synthetic_tokens = 200000
[train]
steps = 3
micro_batch = 4
seq_len = 64
)";

// The golden Llama folder with config.json's `key` set to `value` (the weights stay as they are).
std::string hf_folder(const std::string& root, const std::string& key, const json& value) {
  const std::string src = std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/hf/llama";
  const std::string dir = root + "/hf-" + key;
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(src))
    fs::copy_file(e.path(), dir + "/" + e.path().filename().string(), fs::copy_options::overwrite_existing);
  json c = json::parse(read_file(dir + "/config.json"));
  c[key] = value;
  write_text(dir + "/config.json", c.dump(2));
  return dir;
}

}  // namespace

int main() {
  const std::string root = fresh_dir("hostile-sizes");
  const std::string cfg = root + "/base.toml";
  write_text(cfg, kBase);

  // D8: the planner's parameter sizes come in closed form, not from per-row runs.
  expect_refusal("plan, n_embd 2^30", {"plan", "--config", cfg, "--set", "model.n_embd=1073741824"}, 8,
                 "does not fit");
  expect_refusal("train, n_embd 2^30",
                 {"train", "--config", cfg, "--out-dir", root + "/r1", "--set", "model.n_embd=1073741824"}, 8,
                 "Nothing was allocated");
  expect_refusal("plan, n_embd 2^24, one head",
                 {"plan", "--config", cfg, "--set", "model.n_embd=16777216", "--set", "model.n_head=1"}, 8,
                 "does not fit");
  for (const auto& [key, value] : {std::pair<std::string, json>{"num_hidden_layers", 1000000},
                                   {"hidden_size", int64_t{1} << 30},
                                   {"intermediate_size", int64_t{1} << 30}}) {
    const std::string dir = hf_folder(root, key, value);
    const std::string hf_cfg = root + "/hf-" + key + ".toml";
    write_text(hf_cfg, "[model]\ninit_from = \"" + dir +
                           "\"\n[data]\nsynthetic_tokens = 20000\n[train]\nsteps = 2\nmicro_batch = 2\n"
                           "seq_len = 32\n");
    expect_refusal("plan, config.json " + key, {"plan", "--config", hf_cfg}, 8, "does not fit");
    expect_refusal("train, config.json " + key,
                   {"train", "--config", hf_cfg, "--out-dir", root + "/r-" + key}, 8,
                   "Nothing was allocated");
  }

  // D9: a tokenizer.json id far beyond its vocabulary is refused before the id table is sized.
  json t = json::parse(
      read_file(std::string(FLOTILLA_SOURCE_DIR) + "/tests/engine/golden/tokenizers/qwen/tokenizer.json"));
  for (const int64_t id : {int64_t{1} << 26, int64_t{2147483647}}) {
    t["model"]["vocab"]["x"] = id;
    const std::string dir = root + "/tok-" + std::to_string(id);
    fs::create_directories(dir);
    write_text(dir + "/tokenizer.json", t.dump());
    expect_refusal("tokenizer id " + std::to_string(id),
                   {"tokenizer", "encode", "--tokenizer", dir, "--text", "hello"}, 4,
                   "has id " + std::to_string(id) + ", far beyond the vocabulary's");
  }
  return flotilla_test::summary("test_hostile_sizes");
}
