// Issue 33 D2 (audit row 70) on a real full disk: the run folder is on a small tmpfs with about
// 40 KiB left, checkpoints off, 400 steps. The trainer wrote metrics.jsonl and train.log unchecked:
// the record stopped mid-line and the worker exited 0. Now a failed write ends the run with exit 6
// (I/O) and a message naming the file, the step and the reason, and metrics.jsonl still ends with a
// whole line (every line parses). Needs root to mount (skipped with a note otherwise). Without root:
// metrics.jsonl, then train.log, a link to /dev/full: exit 6 naming that file.
#include <sys/mount.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "check.h"
#include "worker_run.h"

using namespace flotilla_test;
namespace fs = std::filesystem;

namespace {

const char* kConfig = R"(
[run]
name = "diskfull"
threads = 1
[model]
preset = "custom"
n_layer = 1
n_head = 2
n_embd = 32
vocab_size = 128
max_seq_len = 32
[data]
synthetic_tokens = 20000
[train]
steps = 400
micro_batch = 2
seq_len = 16
[checkpoint]
every = 0
save_final = false
)";

const std::vector<std::string> kEnv = {"OMP_NUM_THREADS=1", "FLOTILLA_PEAK_FLOPS=1e11"};

bool contains(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

uint64_t free_bytes(const std::string& path) {
  struct statvfs v {};
  return ::statvfs(path.c_str(), &v) == 0 ? static_cast<uint64_t>(v.f_bavail) * v.f_frsize : 0;
}

// Fills the file system holding dir with a file until about `left` bytes are free.
void fill_to(const std::string& dir, uint64_t left) {
  const uint64_t free = free_bytes(dir);
  if (free <= left) return;
  std::ofstream f(dir + "/filler", std::ios::binary);
  const std::string block(4096, '\0');
  for (uint64_t n = 0; n + left < free; n += block.size()) f.write(block.data(), block.size());
}

// Without root: the record's file, or train.log, is a link to /dev/full (every write fails with
// ENOSPC), the other one is a normal file.
void test_dev_full(const std::string& root, const std::string& cfg, const std::string& probe,
                   const char* file) {
  const std::string run = root + "/devfull-" + file;
  fs::create_directories(run);
  fs::copy(probe + "/data", run + "/data", fs::copy_options::recursive);
  fs::create_symlink("/dev/full", run + "/" + file);
  const ProcResult r = run_worker({"train", "--config", cfg, "--out-dir", run, "--quiet",
                                   "--no-stdout-metrics", "--set", "train.steps=5"},
                                  kEnv);
  CHECK_MSG(r.exit_code == 6, "%s on /dev/full: exit %d (want 6): %s", file, r.exit_code, r.output.c_str());
  CHECK_MSG(contains(r.output, run + "/" + file) && contains(r.output, "failed at step ") &&
                contains(r.output, "No space left on device"),
            "%s", r.output.c_str());
}

}  // namespace

int main() {
  const std::string root = fresh_dir("metrics-diskfull");
  const std::string cfg = root + "/run.toml";
  write_text(cfg, kConfig);
  // The synthetic corpus, made on a normal disk and copied in (as a prepared data folder would be).
  const std::string probe = root + "/probe";
  ProcResult p = run_worker({"train", "--config", cfg, "--out-dir", probe, "--quiet", "--no-stdout-metrics",
                             "--set", "train.steps=1"},
                            kEnv);
  CHECK_MSG(p.exit_code == 0, "%s", p.output.c_str());
  test_dev_full(root, cfg, probe, "metrics.jsonl");
  test_dev_full(root, cfg, probe, "train.log");

  const std::string mnt = root + "/mnt";
  fs::create_directories(mnt);
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=3m") != 0) {
    std::printf("test_metrics_diskfull skipped: cannot mount a tmpfs (%s); needs root\n",
                std::strerror(errno));
    return flotilla_test::summary("test_metrics_diskfull");
  }
  const std::string run = mnt + "/r";
  fs::create_directories(run);
  fs::copy(probe + "/data", run + "/data", fs::copy_options::recursive);
  fill_to(mnt, 40 * 1024);

  const ProcResult r =
      run_worker({"train", "--config", cfg, "--out-dir", run, "--quiet", "--no-stdout-metrics"}, kEnv);
  CHECK_MSG(r.exit_code == 6, "a run whose record could not be written exited %d (want 6): %s", r.exit_code,
            r.output.c_str());
  CHECK_MSG(contains(r.output, "No space left on device") &&
                (contains(r.output, run + "/metrics.jsonl") || contains(r.output, run + "/train.log")) &&
                contains(r.output, "failed at step "),
            "the message does not name the file, the step and the reason: %s", r.output.c_str());
  // The record ends with a whole line: every line parses, the last ends with a newline.
  const std::string text = read_file(run + "/metrics.jsonl");
  CHECK_MSG(!text.empty() && text.back() == '\n', "metrics.jsonl ends with a torn line");
  int lines = 0, bad = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line); ++lines)
    bad += nlohmann::json::parse(line, nullptr, false).is_discarded();
  CHECK_MSG(bad == 0, "%d of %d lines of metrics.jsonl do not parse", bad, lines);
  CHECK_MSG(last_step(run) > 0 && last_step(run) < 400, "last step %lld",
            static_cast<long long>(last_step(run)));
  CHECK_MSG(!contains(text, "\"type\":\"summary\""), "a failed run wrote a summary");

  ::umount2(mnt.c_str(), MNT_DETACH);
  return flotilla_test::summary("test_metrics_diskfull");
}
