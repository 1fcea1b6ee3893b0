// docs/reliability.md C7 on a real full disk (not a fault hook): the run directory is on a small tmpfs
// sized so the first checkpoint fits and the second does not. The worker must fail the save with
// "No space left on device" naming the file, exit 6 (I/O), remove the tmp folder, and leave the
// first checkpoint verifying; once the tmpfs is grown (remount), the same command resumes from it
// and finishes. Needs root to mount (skipped with a note otherwise).
#include <sys/mount.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

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

uint64_t free_bytes(const std::string& dir) {
  struct statvfs v {};
  return ::statvfs(dir.c_str(), &v) == 0 ? static_cast<uint64_t>(v.f_bavail) * v.f_frsize : 0;
}

// `launch` of 2 ranks (dp 2, ZeRO-1) training the config into out.
ProcResult launch2(const std::string& cfg, const std::string& out,
                   const std::vector<std::string>& launch_extra,
                   const std::vector<std::string>& train_extra = {}) {
  std::vector<std::string> args = {"launch", "--nproc-per-node", "2", "--master-port", "0"};
  args.insert(args.end(), launch_extra.begin(), launch_extra.end());
  const std::vector<std::string> train = {"--",        "train",
                                          "--config",  cfg,
                                          "--out-dir", out,
                                          "--quiet",   "--no-stdout-metrics",
                                          "--set",     "parallel.dp=2",
                                          "--set",     "parallel.zero=1"};
  args.insert(args.end(), train.begin(), train.end());
  args.insert(args.end(), train_extra.begin(), train_extra.end());
  return run_worker(args, kEnv);
}

// Audit 2, D11: the same with 2 ranks and ZeRO-1 under launch (every rank writes its own optimizer
// shard). The rank that hit ENOSPC failed alone: the other waited in the barrier, the group ended
// on "peer closed", and the step-N.tmp-* folder with both ranks' partial files stayed, so the disk
// stayed full; launch then retried exit 6 and each restart failed on its first write
// (config.toml.tmp), which became the recorded cause. Now the ranks agree on the failure, rank 0
// removes the whole tmp folder, the exit is 6 with the checkpoint's ENOSPC message, launch does not
// retry it, and once there is space the same command resumes.
void two_ranks(const std::string& root, const std::string& cfg) {
  // Sizes on a normal disk: one 2-rank checkpoint, and everything but the checkpoints.
  const std::string probe = root + "/probe2";
  ProcResult p = launch2(cfg, probe, {}, {"--set", "train.steps=5"});
  CHECK_MSG(p.exit_code == 0, "%s", p.output.c_str());
  const uint64_t ckpt = tree_bytes(probe + "/checkpoints/step-00000005");
  const uint64_t rest = tree_bytes(probe) - tree_bytes(probe + "/checkpoints");

  const std::string mnt = root + "/mnt2";
  fs::create_directories(mnt);
  const uint64_t size = ((rest + ckpt * 3 / 2 + 64 * 1024) / 4096 + 1) * 4096;
  const std::string opts = "size=" + std::to_string(size);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, opts.c_str()) != 0) {
    std::printf("test_checkpoint_tmpfs_full (2 ranks) skipped: cannot mount a tmpfs (%s); needs root\n",
                std::strerror(errno));
    return;
  }
  const std::string out = mnt + "/z", ck = out + "/checkpoints";
  // --max-restarts 2, as `flotilla run` passes it.
  ProcResult r = launch2(cfg, out, {"--max-restarts", "2"});
  CHECK_MSG(r.exit_code == 6, "2 ranks on a full tmpfs (%llu bytes, checkpoint %llu): exit %d (want 6): %s",
            static_cast<unsigned long long>(size), static_cast<unsigned long long>(ckpt), r.exit_code,
            r.output.c_str());
  CHECK_MSG(r.output.find("No space left on device") != std::string::npos &&
                r.output.find("step-00000010.tmp-") != std::string::npos &&
                r.output.find("was removed and the earlier checkpoints") != std::string::npos,
            "%s", r.output.c_str());
  CHECK_MSG(
      r.output.find("restarting") == std::string::npos && r.output.find("config.toml") == std::string::npos,
      "a full disk was retried: %s", r.output.c_str());
  CHECK_MSG(!has_tmp_dir(ck), "the failed save's tmp folder is still in %s", ck.c_str());
  // The space of the failed save is free again (most of a checkpoint).
  CHECK_MSG(free_bytes(mnt) >= ckpt / 2, "%llu bytes free of %llu after the failed save",
            static_cast<unsigned long long>(free_bytes(mnt)), static_cast<unsigned long long>(size));
  for (int rank : {0, 1}) {
    auto latest = flotilla::CheckpointStore(ck).load_latest(rank, nullptr);
    CHECK_MSG(latest && latest->step == 5, "rank %d after the failed save: %s", rank,
              latest ? std::to_string(latest->step).c_str() : "nothing verifies");
  }
  // The tmp folder of a save killed mid-way (SIGKILL: nobody could remove it), filling the disk,
  // is removed before anything else is written at the next start, so that start is not refused.
  const std::string left = ck + "/step-00000010.tmp-0123456789abcdef";
  fs::create_directories(left);
  {
    std::ofstream f(left + "/rank-0.bin", std::ios::binary);
    const std::string chunk(64 * 1024, 'x');
    while (f.write(chunk.data(), static_cast<std::streamsize>(chunk.size())) && free_bytes(mnt) > 0) {
    }
  }
  ProcResult refill =
      launch2(cfg, out, {}, {"--set", "train.steps=7", "--set", "checkpoint.save_final=false"});
  CHECK_MSG(refill.exit_code == 0, "start on a disk filled by a leftover tmp folder: exit %d: %s",
            refill.exit_code, refill.output.c_str());
  CHECK(!has_tmp_dir(ck));
  // Space back: the same command resumes and finishes.
  const std::string bigger = "size=" + std::to_string(size * 4);
  CHECK(::mount("tmpfs", mnt.c_str(), "tmpfs", MS_REMOUNT, bigger.c_str()) == 0);
  ProcResult again = launch2(cfg, out, {"--max-restarts", "2"});
  CHECK_MSG(again.exit_code == 0, "after growing the tmpfs: exit %d: %s", again.exit_code,
            again.output.c_str());
  auto final_ck = flotilla::CheckpointStore(ck).load_latest(1, nullptr);
  CHECK(final_ck && final_ck->step == 12);
  ::umount2(mnt.c_str(), MNT_DETACH);
}

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
  two_ranks(root, cfg);
  return flotilla_test::summary("test_checkpoint_tmpfs_full");
}
