// checkpoint.every = "auto" through the real flotilla-worker: the run announces its interval (an
// event with the inputs, a train.log line), saves at exactly that interval, re-chooses it after
// the first measured save, and follows a checkpoint.mtbi file rewritten while it runs (as the
// scheduler does when it records a preemption on the run's place): a long MTBI stops the
// periodic saves that a 2-second MTBI made frequent; with two data-parallel ranks, both save at
// the step rank 0 chose; a resume starts from the previous start's save time.
#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "check.h"
#include "engine/train/checkpoint_interval.h"
#include "worker_run.h"

using namespace flotilla_test;

namespace {

int64_t num(const nlohmann::json& r, const char* key) {
  return std::atoll(r[key].get<std::string>().c_str());
}
double real(const nlohmann::json& r, const char* key) { return std::atof(r[key].get<std::string>().c_str()); }

}  // namespace

int main() {
  const std::string root = fresh_dir("ckpt_auto_worker");
  const std::string out = root + "/run";
  const std::string log = root + "/worker.log";
  const std::string cfg = root + "/tiny.toml";
  write_text(cfg,
             "[run]\nname = \"auto\"\nthreads = 1\n"
             "[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\nn_embd = 32\nvocab_size = 128\n"
             "max_seq_len = 32\n[data]\nsynthetic_tokens = 30000\n"
             "[train]\nsteps = 600\nmicro_batch = 2\nseq_len = 16\n"
             "[checkpoint]\nevery = \"auto\"\nmtbi_s = 2\nkeep_last = 2\nsave_final = false\n");
  // Steps of about 20 ms: Daly's interval at a 2-second MTBI is a handful of steps.
  const pid_t pid = spawn(
      {FLOTILLA_WORKER_PATH, "train", "--config", cfg, "--out-dir", out, "--quiet", "--no-stdout-metrics"},
      {"FLOTILLA_PEAK_FLOPS=1e11", "FLOTILLA_TEST_STEP_SLEEP_MS=20"}, log);
  // Let it save a few times, then say the place is calm: one interruption in 1e8 s (3 years: the
  // interval then outlasts the run whatever the measured save and step times).
  const auto periodic_saves = [&] {
    int n = 0;
    for (const auto& r : read_metrics(out))
      if (r["type"] == "checkpoint" && r["reason"] == "periodic") ++n;
    return n;
  };
  const bool saved = wait_until([&] { return periodic_saves() >= 3; }, 60);
  CHECK_MSG(saved, "no 3 periodic saves:\n%s", read_file(log).c_str());
  const int64_t step_at_rewrite = last_step(out);
  CHECK(flotilla::write_mtbi_file(out, {1e8, "test: calm place"}));
  const int code = wait_exit(pid);
  CHECK_MSG(code == 0, "exit %d\n%s", code, read_file(log).c_str());

  // Walk the records in order. An interval event comes before its step's record; a periodic save
  // lands exactly `interval` steps after the previous save, or, when the interval changed since
  // that save, at the first step where the new one is due (the change's step, if already past).
  int64_t interval = 0, last_save = 0, file_choice_step = -1, saves_after_file = 0, step = 0, changed_at = -1;
  int choices = 0, periodic = 0;
  std::string first_write_basis, later_write_basis;
  for (const auto& r : read_metrics(out)) {
    if (r["type"] == "step") step = r["step"].get<int64_t>();
    if (r["type"] == "event" && r.contains("ckpt_interval_steps")) {
      ++choices;
      interval = num(r, "ckpt_interval_steps");
      changed_at = step + 1;
      CHECK(interval >= 1);
      const double write = real(r, "write_s"), mtbi = real(r, "mtbi_s"), step_s = real(r, "step_s");
      // The record's figures are Daly's: interval_s from write_s and mtbi_s, steps = interval_s / step_s.
      CHECK_NEAR(real(r, "interval_s"), flotilla::daly_interval_s(write, mtbi),
                 1e-4 * real(r, "interval_s") + 1e-6);
      CHECK_MSG(
          std::llabs(interval - std::max<int64_t>(1, std::llround(real(r, "interval_s") / step_s))) <= 1,
          "%lld vs %g / %g", (long long)interval, real(r, "interval_s"), step_s);
      CHECK(r["basis"].get<std::string>().find("Daly 2006") == 0);
      CHECK(r["message"].get<std::string>().find("checkpoint interval: every " + std::to_string(interval)) ==
            0);
      if (choices == 1) {
        first_write_basis = r["write_basis"].get<std::string>();
        CHECK(mtbi == 2 && r["mtbi_basis"] == "checkpoint.mtbi_s");
      } else {
        later_write_basis = r["write_basis"].get<std::string>();
      }
      if (r["mtbi_basis"] == "test: calm place") {
        CHECK(mtbi == 1e8);
        CHECK(interval > 1000);
        file_choice_step = step;
      }
    }
    if (r["type"] == "checkpoint") {
      const int64_t s = r["step"].get<int64_t>();
      if (r["reason"] == "periodic") {
        ++periodic;
        const bool exact = s - last_save == interval;
        const bool late_change = changed_at > last_save && s - last_save > interval && s == changed_at;
        CHECK_MSG(exact || late_change, "save at %lld, previous %lld, interval %lld (changed at %lld)",
                  (long long)s, (long long)last_save, (long long)interval, (long long)changed_at);
        if (file_choice_step >= 0) ++saves_after_file;
      }
      last_save = s;
    }
  }
  CHECK(choices >= 2);
  CHECK(periodic >= 3);
  CHECK_MSG(first_write_basis.find("estimated") == 0, "%s", first_write_basis.c_str());
  CHECK(later_write_basis == "measured");
  // The rewritten file was seen within a few seconds, and no periodic save followed.
  CHECK_MSG(file_choice_step > 0 && file_choice_step < 600, "file seen at step %lld, written at %lld",
            (long long)file_choice_step, (long long)step_at_rewrite);
  CHECK(file_choice_step >= step_at_rewrite);
  CHECK(saves_after_file == 0);
  const std::string train_log = read_file(out + "/train.log");
  CHECK(train_log.find("checkpoint interval: every ") != std::string::npos);
  CHECK(train_log.find("MTBI 2.0 s (checkpoint.mtbi_s)") != std::string::npos);
  CHECK(train_log.find("MTBI 1157 d (test: calm place)") != std::string::npos);
  CHECK(read_file(out + "/config.toml").find("every = \"auto\"") != std::string::npos);

  // Two data-parallel ranks: rank 0 decides, both save at its step (a save only one rank began
  // would never commit: every rank writes its part before the commit).
  const std::string cfg2 = root + "/dp2.toml", out2 = root + "/dp2";
  write_text(cfg2,
             "[run]\nname = \"auto-dp\"\nthreads = 1\n"
             "[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\nn_embd = 32\nvocab_size = 128\n"
             "max_seq_len = 32\n[data]\nsynthetic_tokens = 30000\n"
             "[train]\nsteps = 80\nmicro_batch = 2\nseq_len = 16\n[parallel]\ndp = 2\ntimeout_s = 20\n"
             "[checkpoint]\nevery = \"auto\"\nmtbi_s = 2\nkeep_last = 2\nsave_final = false\n");
  const ProcResult dp = run_worker({"launch", "--nproc-per-node", "2", "--master-port", "0", "--", "train",
                                    "--config", cfg2, "--out-dir", out2, "--quiet", "--no-stdout-metrics"},
                                   {"FLOTILLA_PEAK_FLOPS=1e11", "FLOTILLA_TEST_STEP_SLEEP_MS=20"});
  CHECK_MSG(dp.exit_code == 0, "%s", dp.output.c_str());
  int dp_saves = 0, dp_choices = 0;
  for (const auto& r : read_metrics(out2)) {
    if (r["type"] == "checkpoint" && r["reason"] == "periodic") ++dp_saves;
    if (r["type"] == "event" && r.contains("ckpt_interval_steps")) {
      ++dp_choices;
      CHECK(r["rank"] == 0);
    }
  }
  CHECK_MSG(dp_saves >= 2 && dp_choices >= 1, "%d saves, %d choices\n%s", dp_saves, dp_choices,
            dp.output.c_str());
  const std::string latest = read_file(out2 + "/checkpoints/LATEST");
  const std::string manifest =
      read_file(out2 + "/checkpoints/" + latest.substr(0, latest.find('\n')) + "/MANIFEST");
  CHECK_MSG(manifest.find("\"world_size\": 2") != std::string::npos, "%s", manifest.c_str());

  // A resume starts from the previous start's last save time (trainer.json), not the estimate.
  const size_t before = read_metrics(out2).size();
  const ProcResult again =
      run_worker({"launch", "--nproc-per-node", "2", "--master-port", "0", "--", "train", "--config", cfg2,
                  "--out-dir", out2, "--set", "train.steps=100", "--quiet", "--no-stdout-metrics"},
                 {"FLOTILLA_PEAK_FLOPS=1e11", "FLOTILLA_TEST_STEP_SLEEP_MS=20"});
  CHECK_MSG(again.exit_code == 0, "%s", again.output.c_str());
  const auto records = read_metrics(out2);
  std::string resumed_basis;
  for (size_t i = before; i < records.size() && resumed_basis.empty(); ++i)
    if (records[i]["type"] == "event" && records[i].contains("ckpt_interval_steps"))
      resumed_basis = records[i]["write_basis"].get<std::string>();
  CHECK_MSG(resumed_basis == "previous start", "'%s'", resumed_basis.c_str());
  CHECK(last_step(out2) == 100);
  return summary("checkpoint_auto_worker");
}
