// docs/reliability.md C9 and R2 through `launch`, with real processes.
// C9: a damaged token shard (one byte truncated; a wrong magic) or a split smaller than one batch is
//     refused by launch's preflight before any rank starts: exit 4 naming the shard, no run
//     directory, no restart, even with --max-restarts 3.
// R2 by error class: a rank that fails with a checkpoint error (every checkpoint damaged, issue 19
//     defect 1) is not retried either (exit 5, zero restarts), while the same launch over good
//     data and checkpoints trains.
#include <filesystem>

#include "check.h"
#include "engine/data/loader.h"
#include "worker_run.h"

using namespace flotilla_test;
namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kEnv = {"OMP_NUM_THREADS=1", "FLOTILLA_PEAK_FLOPS=1e11"};

std::string config_text(const std::string& data_dir) {
  return "[run]\nname = \"pre\"\nthreads = 1\n"
         "[model]\npreset = \"custom\"\nn_layer = 1\nn_head = 2\nn_embd = 32\nvocab_size = 128\nmax_seq_len "
         "= 32\n"
         "[data]\nsource = \"shards\"\ntrain = \"" +
         data_dir + "/train_*.bin\"\nval = \"" + data_dir +
         "/val_000.bin\"\n"
         "[train]\nsteps = 12\nmicro_batch = 2\nseq_len = 16\n"
         "[checkpoint]\nevery = 5\nkeep_last = 2\n";
}

bool has(const ProcResult& r, const std::string& s) { return r.output.find(s) != std::string::npos; }

ProcResult launch(const std::string& cfg, const std::string& out) {
  return run_worker({"launch", "--nproc-per-node", "1", "--master-port", "0", "--max-restarts", "3", "--",
                     "train", "--config", cfg, "--out-dir", out, "--quiet", "--no-stdout-metrics"},
                    kEnv);
}

}  // namespace

int main() {
  const std::string root = fresh_dir("launch-preflight");
  const std::string data = root + "/data";
  fs::create_directories(data);
  std::vector<uint32_t> tokens(4000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>((i * 31 + 7) % 128);
  flotilla::write_shard(data + "/train_000.bin", tokens);
  flotilla::write_shard(data + "/train_001.bin", tokens);
  flotilla::write_shard(data + "/val_000.bin", std::vector<uint32_t>(tokens.begin(), tokens.begin() + 800));
  const std::string cfg = root + "/run.toml";
  write_text(cfg, config_text(data));

  // The good run first (proves the config and data are fine; leaves checkpoints for R2 below).
  const ProcResult good = launch(cfg, root + "/good");
  CHECK_MSG(good.exit_code == 0, "good run exited %d: %s", good.exit_code, good.output.c_str());

  // C9: truncate one shard by a byte.
  const std::string shard = data + "/train_001.bin";
  const std::string intact = read_file(shard);
  fs::resize_file(shard, intact.size() - 1);
  ProcResult r = launch(cfg, root + "/trunc");
  CHECK_MSG(r.exit_code == 4, "truncated shard: exit %d (want 4): %s", r.exit_code, r.output.c_str());
  CHECK_MSG(has(r, "preflight refused the run before starting any rank") && has(r, "train_001.bin"), "%s",
            r.output.c_str());
  CHECK_MSG(!has(r, "restarting") && !fs::exists(root + "/trunc"), "a rank started: %s", r.output.c_str());
  // Wrong magic.
  std::string bad = intact;
  bad[0] = static_cast<char>(bad[0] ^ 0x11);
  write_text(shard, bad);
  r = launch(cfg, root + "/magic");
  CHECK_MSG(r.exit_code == 4 && has(r, "train_001.bin") && !fs::exists(root + "/magic"),
            "bad magic: exit %d: %s", r.exit_code, r.output.c_str());
  write_text(shard, intact);
  // A validation split smaller than one batch (2 x 16 + 1 tokens): the loader's rule, refused by
  // launch with the trainer's own check (issue 18 item 1: the run used to die at step 0).
  flotilla::write_shard(data + "/val_small.bin", std::vector<uint32_t>(tokens.begin(), tokens.begin() + 20));
  const std::string small_cfg = root + "/small-val.toml";
  std::string small_text = config_text(data);
  small_text.replace(small_text.find("val_000.bin"), 11, "val_small.bin");
  write_text(small_cfg, small_text);
  r = launch(small_cfg, root + "/small");
  CHECK_MSG(r.exit_code == 4 && has(r, "preflight refused") && has(r, "data.val") && has(r, "val_small.bin") &&
                !fs::exists(root + "/small"),
            "val smaller than a batch: exit %d: %s", r.exit_code, r.output.c_str());

  // R2: a checkpoint error on the rank is never retried. Damage both checkpoints of the good run.
  const std::string ck = root + "/good/checkpoints";
  int damaged = 0;
  for (const auto& dir : flotilla::CheckpointStore(ck).list()) {
    std::string b = read_file(dir + "/rank-0.bin");
    b.at(1000) = static_cast<char>(b[1000] ^ 0x5a);
    write_text(dir + "/rank-0.bin", b);
    ++damaged;
  }
  CHECK(damaged == 2);
  r = launch(cfg, root + "/good");
  CHECK_MSG(r.exit_code == 5, "damaged checkpoints under launch: exit %d (want 5): %s", r.exit_code,
            r.output.c_str());
  CHECK_MSG(!has(r, "restarting") && has(r, "not retrying"), "%s", r.output.c_str());
  return flotilla_test::summary("test_launch_preflight");
}
