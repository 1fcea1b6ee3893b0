// Resume equivalence (docs/reliability.md C10) and its negative controls (C11), with real processes.
//
// Run A trains 2N steps straight. Run B trains N steps (--stop-after N, checkpoint), exits, and a
// NEW process resumes and trains to 2N. Run B' is killed with SIGKILL after step N and auto-resumes.
// The comparator checks, bit for bit: the losses of steps N+1..2N (float32 bits as written to
// metrics.jsonl), the final parameters, AdamW m and v, the RNG state and the data cursor (which
// decides the next batch's token ids). Each negative control drops one piece of state on resume
// and must make the comparator report a difference, so it is never blind to that piece.
#include <cstring>
#include <filesystem>
#include <random>

#include "check.h"
#include "engine/checkpoint/checkpoint.h"
#include "worker_run.h"

using namespace flotilla_test;

namespace {

constexpr int kN = 6;

std::string config_text() {
  return R"(
[run]
name = "resume"
seed = 7
threads = 1
[model]
preset = "custom"
n_layer = 2
n_head = 4
n_embd = 64
vocab_size = 256
max_seq_len = 64
[data]
source = "synthetic"
synthetic_tokens = 60000
shuffle = true
[train]
steps = 12
micro_batch = 4
seq_len = 32
global_batch_tokens = 256
[optim]
lr = 0.003
warmup_steps = 3
schedule = "cosine"
[checkpoint]
every = 3
keep_last = 3
[eval]
every = 4
batches = 2
sample_every = 2
sample_tokens = 4
)";
}

const std::vector<std::string> kEnv = {"OMP_NUM_THREADS=1", "FLOTILLA_PEAK_FLOPS=1e11"};

flotilla::LoadedCheckpoint final_checkpoint(const std::string& run_dir, int64_t step) {
  flotilla::CheckpointStore store(run_dir + "/checkpoints");
  char name[32];
  std::snprintf(name, sizeof name, "/step-%08lld", static_cast<long long>(step));
  return store.load_dir(run_dir + "/checkpoints" + name, 0);
}

// Every difference between two runs' results for steps kN+1..2kN.
std::vector<std::string> compare_runs(const std::string& a_dir, const std::string& b_dir) {
  std::vector<std::string> diffs;
  const auto la = step_losses(a_dir), lb = step_losses(b_dir);
  for (int64_t s = kN + 1; s <= 2 * kN; ++s) {
    if (!la.count(s) || !lb.count(s)) {
      diffs.push_back("missing loss for step " + std::to_string(s));
      continue;
    }
    uint32_t ba, bb;
    std::memcpy(&ba, &la.at(s), 4);
    std::memcpy(&bb, &lb.at(s), 4);
    if (ba != bb) diffs.push_back("loss bits differ at step " + std::to_string(s));
  }
  const auto ca = final_checkpoint(a_dir, 2 * kN), cb = final_checkpoint(b_dir, 2 * kN);
  // No tautology: the compared buffers come from different files.
  if (ca.dir == cb.dir) diffs.push_back("comparing a checkpoint with itself");
  for (const auto& ta : ca.tensors) {
    bool found = false;
    for (const auto& tb : cb.tensors) {
      if (tb.name != ta.name) continue;
      found = true;
      if (ta.data.data() == tb.data.data()) diffs.push_back("same buffer for " + ta.name);
      if (ta.data != tb.data) diffs.push_back("tensor " + ta.name + " differs");
    }
    if (!found) diffs.push_back("tensor " + ta.name + " missing");
  }
  const auto sa = nlohmann::json::parse(ca.trainer_state_json),
             sb = nlohmann::json::parse(cb.trainer_state_json);
  if (sa["rng"] != sb["rng"]) diffs.push_back("RNG state differs");
  if (sa["train_cursor"] != sb["train_cursor"]) diffs.push_back("data cursor differs");
  if (sa["tokens"] != sb["tokens"]) diffs.push_back("token count differs");
  return diffs;
}

std::string print(const std::vector<std::string>& d) {
  std::string s;
  for (const auto& x : d) s += x + "; ";
  return s;
}

}  // namespace

int main() {
  const std::string root = fresh_dir("resume_equivalence");
  const std::string cfg = root + "/run.toml";
  write_text(cfg, config_text());
  auto train = [&](const std::string& out, std::vector<std::string> extra,
                   std::vector<std::string> env = kEnv) {
    std::vector<std::string> args = {"train",   "--config",           cfg, "--out-dir", out,
                                     "--quiet", "--no-stdout-metrics"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_worker(args, env);
  };

  // Run A: 2N steps straight.
  const std::string a = root + "/A";
  auto ra = train(a, {});
  CHECK_MSG(ra.exit_code == 0, "%s", ra.output.c_str());

  // Smoke: a second fresh identical run gives identical loss bits for every step.
  const std::string a2 = root + "/A2";
  CHECK(train(a2, {}).exit_code == 0);
  const auto l1 = step_losses(a), l2 = step_losses(a2);
  CHECK(l1.size() == 2 * kN);
  CHECK(std::memcmp(&l1.at(2 * kN), &l2.at(2 * kN), 4) == 0);
  CHECK(compare_runs(a, a2).empty());

  // Run B: N steps, exit, new process, resume, N more.
  const std::string b = root + "/B";
  auto rb1 = train(b, {"--stop-after", std::to_string(kN)});
  CHECK_MSG(rb1.exit_code == 0, "%s", rb1.output.c_str());
  CHECK(step_losses(b).rbegin()->first == kN);
  auto rb2 = train(b, {});
  CHECK_MSG(rb2.exit_code == 0, "%s", rb2.output.c_str());
  const auto starts = [&](const std::string& dir) {
    std::vector<int64_t> s;
    for (const auto& r : read_metrics(dir))
      if (r["type"] == "run_start") s.push_back(r["start_step"].get<int64_t>());
    return s;
  };
  CHECK((starts(b) == std::vector<int64_t>{0, kN}));
  const auto diffs_b = compare_runs(a, b);
  CHECK_MSG(diffs_b.empty(), "B differs from A: %s", print(diffs_b).c_str());

  // Run B': SIGKILL somewhere after step N (seeded), then auto-resume from the newest verified checkpoint.
  std::mt19937 gen(20261130);
  for (int round = 0; round < 2; ++round) {
    const std::string bp = root + "/Bprime" + std::to_string(round);
    const int kill_after = kN + 1 + static_cast<int>(gen() % (kN - 1));
    // Paced (a sleep after each step, nothing else changes) so that the kill lands mid-run: unpaced,
    // the 12 tiny steps could all finish between two polls and the run exit 0 before the kill.
    auto paced = kEnv;
    paced.push_back("FLOTILLA_TEST_STEP_SLEEP_MS=100");
    const pid_t pid = spawn(
        {FLOTILLA_WORKER_PATH, "train", "--config", cfg, "--out-dir", bp, "--quiet", "--no-stdout-metrics"},
        paced, bp + ".log");
    const bool reached = wait_until(
        [&] {
          const auto l = step_losses(bp);
          return !l.empty() && l.rbegin()->first >= kill_after;
        },
        60);
    kill(pid, SIGKILL);
    CHECK(wait_exit(pid) == 128 + SIGKILL);
    CHECK(reached);
    auto rr = train(bp, {});
    CHECK_MSG(rr.exit_code == 0, "%s", rr.output.c_str());
    const auto diffs = compare_runs(a, bp);
    CHECK_MSG(diffs.empty(), "B' (killed after step %d) differs from A: %s", kill_after,
              print(diffs).c_str());
  }

  // Negative controls: each dropped piece of state must be seen.
  const std::vector<std::pair<std::string, std::string>> controls = {
      {"rng", "RNG state differs"},
      {"cursor", "data cursor differs"},
      {"moments", "tensor adam_m differs"},
      {"lr", "loss bits differ"},
  };
  for (const auto& [skip, expected] : controls) {
    const std::string nc = root + "/neg-" + skip;
    CHECK(train(nc, {"--stop-after", std::to_string(kN)}).exit_code == 0);
    auto env = kEnv;
    env.push_back("FLOTILLA_TEST_SKIP_RESTORE=" + skip);
    CHECK(train(nc, {}, env).exit_code == 0);
    const auto diffs = compare_runs(a, nc);
    CHECK_MSG(!diffs.empty(), "negative control '%s' was not detected", skip.c_str());
    CHECK_MSG(print(diffs).find(expected) != std::string::npos, "control '%s' gave: %s", skip.c_str(),
              print(diffs).c_str());
  }
  return summary("resume_equivalence");
}
