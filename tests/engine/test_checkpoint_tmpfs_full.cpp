// docs/reliability.md C7 on a real full disk (not a fault hook): the run directory is on a small tmpfs
// sized so the first checkpoint fits and the second does not. The worker must fail the save with
// "No space left on device" naming the file, exit 6 (I/O), remove the tmp folder, and leave the
// first checkpoint verifying; once the tmpfs is grown (remount), the same command resumes from it
// and finishes. Needs root to mount (skipped with a note otherwise).
#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "check.h"
#include "worker_run.h"

using namespace flotilla_test;
namespace fs = std::filesystem;

namespace {

const char* kConfig = R"(
[run]
name = "full"
threads = 1
[model]
preset = "custom"
n_layer = 2
n_head = 4
n_embd = 128
vocab_size = 256
max_seq_len = 32
[data]
synthetic_tokens = 20000
[train]
steps = 12
micro_batch = 2
seq_len = 16
[checkpoint]
every = 5
keep_last = 2
)";

const std::vector<std::string> kEnv = {"OMP_NUM_THREADS=1", "FLOTILLA_PEAK_FLOPS=1e11"};

uint64_t tree_bytes(const std::string& dir) {
  uint64_t n = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) n += e.file_size();
  return n;
}

bool has_tmp_dir(const std::string& ck) {
  std::error_code ec;
  for (fs::directory_iterator it(ck, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename().string().find(".tmp-") != std::string::npos) return true;
  return false;
}

}  // namespace

int main() {
  const std::string root = fresh_dir("ckpt-tmpfs-full");
  const std::string cfg = root + "/run.toml";
  write_text(cfg, kConfig);
  // Sizes on a normal disk: one checkpoint, and everything but the checkpoints.
  const std::string probe = root + "/probe";
  ProcResult p = run_worker({"train", "--config", cfg, "--out-dir", probe, "--quiet", "--no-stdout-metrics",
                             "--set", "train.steps=5"},
                            kEnv);
  CHECK_MSG(p.exit_code == 0, "%s", p.output.c_str());
  const uint64_t ckpt = tree_bytes(probe + "/checkpoints/step-00000005");
  const uint64_t rest = tree_bytes(probe) - tree_bytes(probe + "/checkpoints");

  const std::string mnt = root + "/mnt";
  fs::create_directories(mnt);
  // Room for the data, the logs and 1.5 checkpoints: step 5 fits, step 10 does not.
  const uint64_t size = ((rest + ckpt * 3 / 2 + 64 * 1024) / 4096 + 1) * 4096;
  const std::string opts = "size=" + std::to_string(size);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, opts.c_str()) != 0) {
    std::printf("test_checkpoint_tmpfs_full skipped: cannot mount a tmpfs (%s); needs root\n",
                std::strerror(errno));
    return flotilla_test::summary("test_checkpoint_tmpfs_full");
  }
  const std::string out = mnt + "/run", ck = out + "/checkpoints";
  ProcResult r =
      run_worker({"train", "--config", cfg, "--out-dir", out, "--quiet", "--no-stdout-metrics"}, kEnv);
  CHECK_MSG(r.exit_code == 6, "full tmpfs (%llu bytes, checkpoint %llu): exit %d (want 6): %s",
            static_cast<unsigned long long>(size), static_cast<unsigned long long>(ckpt), r.exit_code,
            r.output.c_str());
  CHECK_MSG(r.output.find("No space left on device") != std::string::npos &&
                r.output.find("rank-0.bin") != std::string::npos,
            "%s", r.output.c_str());
  CHECK(!has_tmp_dir(ck));
  flotilla::CheckpointStore store(ck);
  std::vector<std::string> warnings;
  auto latest = store.load_latest(0, &warnings);
  CHECK_MSG(latest && latest->step == 5 && warnings.empty(), "after the failed save: %s",
            latest ? std::to_string(latest->step).c_str() : "nothing verifies");

  // Space back: the same command resumes from step 5 and finishes.
  const std::string bigger = "size=" + std::to_string(size * 4);
  CHECK(::mount("tmpfs", mnt.c_str(), "tmpfs", MS_REMOUNT, bigger.c_str()) == 0);
  ProcResult again =
      run_worker({"train", "--config", cfg, "--out-dir", out, "--quiet", "--no-stdout-metrics"}, kEnv);
  CHECK_MSG(again.exit_code == 0, "after growing the tmpfs: exit %d: %s", again.exit_code,
            again.output.c_str());
  CHECK(last_step(out) == 12);
  auto final_ck = flotilla::CheckpointStore(ck).load_latest(0, nullptr);
  CHECK(final_ck && final_ck->step == 12);
  ::umount2(mnt.c_str(), MNT_DETACH);
  return flotilla_test::summary("test_checkpoint_tmpfs_full");
}
