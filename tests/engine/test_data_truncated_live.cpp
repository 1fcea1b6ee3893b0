// docs/reliability.md C9 under a running worker (audit 2, D15): the train shards are truncated to
// 100 bytes while `train` reads them. A memory-mapped read handed the trainer zeros (the rest of the
// file's last page: one update applied on garbage, loss 0.67 -> 9.60) and then died of SIGBUS (rc
// 135) with no message. Now every read is checked against the file: exit 4 (data error) naming
// the shard, the size its header promises and the size it has now, and no step trained on bytes
// that are not in the file.
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include "check.h"
#include "worker_run.h"

using namespace flotilla_test;
namespace fs = std::filesystem;

namespace {

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

}  // namespace

int main() {
  const std::string root = fresh_dir("data-truncated-live");
  // A learnable corpus (the synthetic Markov chain), as three identical train shards.
  const std::string data = root + "/data";
  ProcResult syn = run_worker(
      {"data", "synth", "--out", data, "--vocab", "128", "--tokens", "60000", "--val-tokens", "2000"});
  CHECK_MSG(syn.exit_code == 0, "%s", syn.output.c_str());
  for (const char* copy : {"/train_001.bin", "/train_002.bin"})
    fs::copy_file(data + "/train_000.bin", data + copy);
  const std::string cfg = root + "/run.toml", out = root + "/run";
  write_text(cfg,
             "[run]\nname = \"trunc\"\nthreads = 1\n"
             "[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\nn_embd = 32\nvocab_size = 128\n"
             "max_seq_len = 32\n"
             "[data]\nsource = \"shards\"\ntrain = \"" +
                 data + "/train_*.bin\"\nval = \"" + data +
                 "/val_000.bin\"\n"
                 "[train]\nsteps = 100000\nmicro_batch = 2\nseq_len = 16\n"
                 "[eval]\nevery = 0\n"
                 "[checkpoint]\nevery = 0\nsave_final = false\n");
  const std::string log = root + "/train.out";
  const pid_t pid =
      spawn({FLOTILLA_WORKER_PATH, "train", "--config", cfg, "--out-dir", out, "--no-stdout-metrics"},
            {"OMP_NUM_THREADS=1", "FLOTILLA_PEAK_FLOPS=1e11", "FLOTILLA_TEST_STEP_SLEEP_MS=20"}, log);
  // Truncate once it has trained a few steps: it reads the first page of train_000.bin, whose tail
  // a memory map would now show as zeros.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (last_step(out) < 8 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK_MSG(last_step(out) >= 8, "the run never reached step 8: %s", read_file(log).c_str());
  const int64_t at_truncation = last_step(out);
  for (const char* shard : {"/train_000.bin", "/train_001.bin", "/train_002.bin"})
    fs::resize_file(data + shard, 100);
  const int code = wait_exit(pid);
  const std::string said = read_file(log);
  CHECK_MSG(code == 4, "exit %d (want 4, a data error; 135 is SIGBUS): %s", code, said.c_str());
  CHECK_MSG(contains(said, "shard " + data + "/train_000.bin: the file is now 100 bytes") &&
                contains(said, "header promises 1,024 + 2 x 60,000 tokens = 121,024 bytes") &&
                contains(said, "truncated while this run was reading it") &&
                contains(said, "Restore the shard"),
            "%s", said.c_str());
  // No update on zeros: the first read after the truncation fails, so at most the step whose batch
  // was already read (and the race with the resize) is recorded after it; a memory map went on for
  // dozens of steps on the zeroed rest of the first page.
  CHECK_MSG(last_step(out) <= at_truncation + 3, "truncated at step %lld, steps recorded up to %lld",
            static_cast<long long>(at_truncation), static_cast<long long>(last_step(out)));
  const auto losses = step_losses(out);
  CHECK(!losses.empty());
  float before = 0;
  for (const auto& [step, loss] : losses)
    if (step <= at_truncation) before = std::max(before, loss);
  for (const auto& [step, loss] : losses)
    CHECK_MSG(std::isfinite(loss) && loss <= before * 1.05f,
              "step %lld: loss %.4f after the truncation (at most %.4f before)", static_cast<long long>(step),
              static_cast<double>(loss), static_cast<double>(before));
  return flotilla_test::summary("test_data_truncated_live");
}
