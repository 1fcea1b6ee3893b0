// docs/reliability.md C4 with the real worker: SIGKILL arrives during the emergency save that SIGTERM
// started. keep_last = 1, so a purge that ran before the new commit (KempnerForge#102) would leave
// nothing loadable. The worker gets SIGTERM after its periodic step-5 checkpoint; as soon as the
// emergency save's step-N.tmp-* folder appears, it gets SIGKILL after a seeded delay (0 to 700 ms,
// so the kill lands before, during and after the commit rename). Oracle, for every delay: a
// checkpoint verifies (the new one if its rename happened, else the previous one, byte for byte),
// no half-deleted folder loads, and the next `train` resumes from it and finishes with exit 0.
#include <signal.h>

#include <filesystem>
#include <random>

#include "check.h"
#include "worker_run.h"

using namespace flotilla_test;
namespace fs = std::filesystem;

namespace {

const char* kConfig = R"(
[run]
name = "c4"
threads = 1
[model]
preset = "custom"
n_layer = 4
n_head = 4
n_embd = 256
vocab_size = 256
max_seq_len = 32
[data]
synthetic_tokens = 40000
[train]
steps = 100000
micro_batch = 2
seq_len = 16
[checkpoint]
every = 5
keep_last = 1
preempt_grace_s = 60
)";

const std::vector<std::string> kEnv = {"OMP_NUM_THREADS=1", "FLOTILLA_PEAK_FLOPS=1e11"};

bool has_tmp_dir(const std::string& ck) {
  std::error_code ec;
  for (fs::directory_iterator it(ck, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename().string().find(".tmp-") != std::string::npos) return true;
  return false;
}

void one_kill(const std::string& root, int index, int delay_ms) {
  const std::string cfg = root + "/c4.toml", out = root + "/run-" + std::to_string(index);
  write_text(cfg, kConfig);
  const std::string ck = out + "/checkpoints";
  const pid_t pid = spawn(
      {FLOTILLA_WORKER_PATH, "train", "--config", cfg, "--out-dir", out, "--quiet", "--no-stdout-metrics"},
      kEnv, out + ".log");
  CHECK(wait_until([&] { return fs::exists(ck + "/step-00000005/MANIFEST") || last_step(out) >= 10; }, 60));
  // The newest committed checkpoint when SIGTERM is sent (keep_last = 1: the only one).
  std::string prev;
  int64_t prev_step = -1;
  for (const auto& dir : flotilla::CheckpointStore(ck).list()) prev = dir;
  if (!prev.empty()) prev_step = std::stoll(prev.substr(prev.size() - 8));
  const std::string prev_bytes = prev.empty() ? "" : read_file(prev + "/rank-0.bin");
  kill(pid, SIGTERM);
  bool saw_tmp = false;
  for (int i = 0; i < 30000 && !saw_tmp; ++i) {  // poll every 0.2 ms: the save is short
    saw_tmp = has_tmp_dir(ck);
    if (!saw_tmp) usleep(200);
  }
  if (delay_ms > 0) usleep(static_cast<useconds_t>(delay_ms) * 1000);
  kill(pid, SIGKILL);
  const int code = wait_exit(pid);
  CHECK_MSG(saw_tmp || code == 10, "delay %d: no emergency save seen (exit %d)", delay_ms, code);

  flotilla::CheckpointStore store(ck);
  std::vector<std::string> warnings;
  auto latest = store.load_latest(0, &warnings);
  CHECK_MSG(latest.has_value(), "delay %d: nothing verifies after SIGKILL in the emergency save", delay_ms);
  if (latest && latest->step == prev_step)
    CHECK_MSG(read_file(prev + "/rank-0.bin") == prev_bytes, "delay %d: the previous checkpoint changed",
              delay_ms);
  if (latest && latest->step != prev_step) CHECK(latest->step > prev_step);
  const int64_t resumed_from = latest ? latest->step : -1;

  // The next start resumes from it (cleaning the leftover tmp folder) and finishes.
  const ProcResult r =
      run_worker({"train", "--config", cfg, "--out-dir", out, "--quiet", "--no-stdout-metrics", "--set",
                  "train.steps=" + std::to_string(resumed_from + 3)},
                 kEnv);
  CHECK_MSG(r.exit_code == 0, "delay %d: resume exited %d: %s", delay_ms, r.exit_code, r.output.c_str());
  CHECK(!has_tmp_dir(ck));
  std::printf(
      "delay %2d ms (tmp folder seen: %s, exit %d): %s, resumed from step %lld\n", delay_ms,
      saw_tmp ? "yes" : "no", code,
      latest && latest->step != prev_step ? "emergency checkpoint committed" : "previous checkpoint kept",
      static_cast<long long>(resumed_from));
}

}  // namespace

int main() {
  const std::string root = fresh_dir("emergency-save-kill");
  std::mt19937 rng(19);  // seeded: the same delays on every run
  std::vector<int> delays = {0};
  for (int i = 0; i < 4; ++i) delays.push_back(static_cast<int>(rng() % 700) + 1);
  for (size_t i = 0; i < delays.size(); ++i) one_kill(root, static_cast<int>(i), delays[i]);
  return flotilla_test::summary("test_emergency_save_kill");
}
