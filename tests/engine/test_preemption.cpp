// Preemption (docs/reliability.md C3): SIGTERM makes the worker stop at the next step boundary.
// With a generous grace period it writes an emergency checkpoint and exits with code 10
// ("preempted"), and a resume starts at exactly that step. With a grace period shorter than the
// measured save time it saves nothing, still exits 10, and a resume falls back to the last
// periodic checkpoint. SIGUSR1 writes a checkpoint and training continues.
#include <filesystem>

#include "check.h"
#include "worker_run.h"

using namespace flotilla_test;

namespace {

std::string config_text(double grace) {
  return R"(
[run]
name = "preempt"
threads = 1
[model]
preset = "custom"
n_layer = 2
n_head = 2
n_embd = 32
vocab_size = 128
max_seq_len = 32
[data]
synthetic_tokens = 30000
[train]
steps = 100000
micro_batch = 2
seq_len = 16
[checkpoint]
every = 5
keep_last = 2
preempt_grace_s = )" +
         std::to_string(grace) + "\n";
}

const std::vector<std::string> kEnv = {"OMP_NUM_THREADS=1", "FLOTILLA_PEAK_FLOPS=1e11"};

std::vector<nlohmann::json> records(const std::string& dir, const std::string& type) {
  std::vector<nlohmann::json> out;
  for (const auto& r : read_metrics(dir))
    if (r["type"] == type) out.push_back(r);
  return out;
}

}  // namespace

int main() {
  const std::string root = fresh_dir("preemption");

  // Generous grace: emergency checkpoint at the step where the signal was seen.
  {
    const std::string cfg = root + "/grace.toml", out = root + "/grace";
    write_text(cfg, config_text(30));
    const pid_t pid = spawn({FLOTILLA_WORKER_PATH, "train", "--config", cfg, "--out-dir", out, "--quiet"},
                            kEnv, out + ".log");
    // Wait past the first periodic save (so a save time is measured), then ask for a checkpoint.
    CHECK(wait_until([&] { return last_step(out) >= 7; }, 60));
    kill(pid, SIGUSR1);
    CHECK(wait_until(
        [&] {
          for (const auto& c : records(out, "checkpoint"))
            if (c["reason"] == "request") return true;
          return false;
        },
        30));
    const int64_t before = last_step(out);
    CHECK(wait_until([&] { return last_step(out) >= before + 2; }, 30));  // it kept training
    kill(pid, SIGTERM);
    const int code = wait_exit(pid);
    CHECK_MSG(code == 10, "exit code %d", code);
    const auto cks = records(out, "checkpoint");
    CHECK(!cks.empty() && cks.back()["reason"] == "preempted");
    const int64_t stopped_at = last_step(out);
    CHECK(!cks.empty() && cks.back()["step"].get<int64_t>() == stopped_at);
    const auto summary_records = records(out, "summary");
    CHECK(!summary_records.empty() && summary_records.back()["exit"] == "preempted");
    // Resume starts at exactly the preempted step.
    auto r = run_worker({"train", "--config", cfg, "--out-dir", out, "--quiet", "--stop-after",
                         std::to_string(stopped_at + 1)},
                        kEnv);
    CHECK_MSG(r.exit_code == 0, "%s", r.output.c_str());
    const auto starts = records(out, "run_start");
    CHECK(starts.size() == 2 && starts.back()["start_step"].get<int64_t>() == stopped_at);
  }

  // Grace shorter than any save: no emergency save; resume from the last periodic checkpoint.
  {
    const std::string cfg = root + "/nograce.toml", out = root + "/nograce";
    write_text(cfg, config_text(0));
    const pid_t pid = spawn({FLOTILLA_WORKER_PATH, "train", "--config", cfg, "--out-dir", out, "--quiet"},
                            kEnv, out + ".log");
    CHECK(wait_until([&] { return last_step(out) >= 7; }, 60));
    kill(pid, SIGTERM);
    CHECK(wait_exit(pid) == 10);
    const int64_t stopped_at = last_step(out);
    for (const auto& c : records(out, "checkpoint")) CHECK(c["reason"] == "periodic");
    const int64_t last_periodic = records(out, "checkpoint").back()["step"].get<int64_t>();
    CHECK(last_periodic % 5 == 0 && last_periodic <= stopped_at);
    bool warned = false;
    for (const auto& e : records(out, "event"))
      warned = warned || e["message"].get<std::string>().find("grace period") != std::string::npos;
    CHECK(warned);
    auto r = run_worker({"train", "--config", cfg, "--out-dir", out, "--quiet", "--stop-after",
                         std::to_string(last_periodic + 1)},
                        kEnv);
    CHECK(r.exit_code == 0);
    CHECK(records(out, "run_start").back()["start_step"].get<int64_t>() == last_periodic);
  }
  // Signals while the run is still setting up (a budget stop or a Slurm USR1 right after the
  // start): the handlers are installed before anything else, so USR1 is a checkpoint request (its
  // default action would kill the worker) and TERM a stop, both honoured after step 1. The window
  // is widened by measuring the FMA peak (no FLOTILLA_PEAK_FLOPS, an empty cache folder); the
  // worker writes config.toml after installing them.
  {
    const std::string cfg = root + "/early.toml", out = root + "/early";
    write_text(cfg, config_text(30));
    const pid_t pid =
        spawn({FLOTILLA_WORKER_PATH, "train", "--config", cfg, "--out-dir", out, "--quiet"},
              {"OMP_NUM_THREADS=1", "FLOTILLA_CACHE_DIR=" + root + "/early-cache"}, out + ".log");
    CHECK(wait_until([&] { return std::filesystem::exists(out + "/config.toml"); }, 60));
    kill(pid, SIGUSR1);
    kill(pid, SIGTERM);
    const int code = wait_exit(pid);
    CHECK_MSG(code == 10, "exit code %d: %s", code, read_file(out + ".log").c_str());
    const auto cks = records(out, "checkpoint");
    CHECK_MSG(!cks.empty() && cks.back()["reason"] == "preempted" && cks.back()["step"].get<int64_t>() >= 1,
              "%zu checkpoints", cks.size());
  }
  return summary("preemption");
}
