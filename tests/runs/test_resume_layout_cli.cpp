// `flotilla runs resume RUN --layout ...` and `flotilla runs fork RUN --layout ...` through the runs
// service, as a user drives them (the real flotilla and flotilla-worker binaries, a real SQLite file):
// - a 2-rank run (dp=2) stopped with Ctrl-C resumes on 1 rank (dp=1) in the same row: every step
//   is stored once, the losses are those of one uninterrupted 2-rank run (the checkpoint re-cut,
//   the global batch kept), and the re-cut is recorded as an event;
// - a layout the model cannot take (tp=3 with 2 heads) is refused before anything starts, and
//   the run is left as it was;
// - a fork from a chosen checkpoint on another layout is a new run recorded as the fork, starting
//   after that step;
// - `runs checkpoints --json` says where each checkpoint is on this machine, and `runs fetch` of a
//   local run answers its own folder (nothing copied);
// - `runs sample` and `runs export-model` read a checkpoint of either layout (as the app's Sample and
//   Export weights do).
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <map>

#include <nlohmann/json.hpp>

#include "check.h"
#include "db/database.h"
#include "db/queries.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "worker_run.h"

using namespace flotilla_test;
namespace db = flotilla::db;
namespace fs = std::filesystem;

namespace {

std::string g_root;
int g_calls = 0;

std::vector<std::string> env() {
  return {"OMP_NUM_THREADS=1", "DISPLAY=", "WAYLAND_DISPLAY=", "QT_QPA_PLATFORM="};
}

// `flotilla --db DB args...` in g_root, in the background; its output in *log. `slow`: each step of
// its worker takes 100 ms more (FLOTILLA_TEST_STEP_SLEEP_MS), so a stop lands part way.
pid_t spawn_cli(const std::vector<std::string>& args, std::string* log, bool slow = false) {
  *log = g_root + "/cli" + std::to_string(++g_calls) + ".log";
  std::vector<std::string> argv = {"/bin/sh",         "-c",   "cd \"$0\" && exec \"$@\"", g_root,
                                   FLOTILLA_CLI_PATH, "--db", g_root + "/store.db"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::string> e = env();
  if (slow) e.push_back("FLOTILLA_TEST_STEP_SLEEP_MS=100");
  return spawn(argv, e, *log);
}

ProcResult cli(const std::vector<std::string>& args) {
  std::string log;
  ProcResult r;
  r.exit_code = wait_exit(spawn_cli(args, &log));
  r.output = read_file(log);
  return r;
}

constexpr int64_t kSteps = 40;

// A small GPT-2 on synthetic tokens, 2 heads, a checkpoint every 5 steps.
std::string config(const std::string& name) {
  const std::string path = g_root + "/" + name + ".toml";
  write_text(
      path,
      "[run]\nname = \"" + name +
          "\"\nthreads = 1\n[model]\npreset = \"custom\"\nn_layer = 2\n"
          "n_head = 2\nn_embd = 32\nvocab_size = 128\nmax_seq_len = 32\n[data]\nsynthetic_tokens = "
          "30000\n[train]\nsteps = " +
          std::to_string(kSteps) +
          "\nmicro_batch = 2\nseq_len = 16\n[parallel]\ndp = 2\n[checkpoint]\nevery = 5\nkeep_last = 100\n");
  return path;
}

db::Run run_named(const std::string& name) {
  const db::Database d(g_root + "/store.db");
  return db::get_run(d, name);
}

// step -> loss, as stored; `repeats` counts steps stored more than once.
std::map<int64_t, double> losses(const std::string& name, int* repeats = nullptr) {
  const db::Database d(g_root + "/store.db");
  std::map<int64_t, double> out;
  if (repeats) *repeats = 0;
  for (const db::Point& p : db::metric_points(d, db::get_run(d, name).id, "loss")) {
    if (out.count(p.step) && repeats) ++*repeats;
    out[p.step] = p.value;
  }
  return out;
}

int64_t steps_of(const std::string& name) {
  const db::Database d(g_root + "/store.db");
  const auto r = db::find_run(d, name);
  return r ? static_cast<int64_t>(db::metric_points(d, r->id, "loss").size()) : 0;
}

bool has(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

// The largest relative difference of `got` from `want` over the steps both have from `from` on.
double worst_difference(const std::map<int64_t, double>& got, const std::map<int64_t, double>& want,
                        int64_t from) {
  double worst = 0;
  for (const auto& [step, loss] : got)
    if (step >= from && want.count(step))
      worst = std::max(worst, std::fabs(loss - want.at(step)) / std::max(1e-12, std::fabs(want.at(step))));
  return worst;
}

}  // namespace

int main() {
  g_root = fresh_dir("resume_layout_cli");
  // The reference: one uninterrupted 2-rank run.
  const ProcResult ref = cli({"run", config("ref"), "--quiet"});
  CHECK_MSG(ref.exit_code == 0, "%s", ref.output.c_str());
  const std::map<int64_t, double> want = losses("ref");
  CHECK(static_cast<int64_t>(want.size()) == kSteps);

  // The same run, stopped with Ctrl-C part way.
  std::string log;
  const pid_t pid = spawn_cli({"run", config("moved")}, &log, true);
  CHECK(wait_until([&] { return steps_of("moved") >= 12; }, 120));
  ::kill(pid, SIGINT);
  const int stop_exit = wait_exit(pid);
  CHECK_MSG(stop_exit == 10, "exit %d\n%s", stop_exit, read_file(log).c_str());
  const int64_t stopped_at = steps_of("moved");
  CHECK_MSG(stopped_at < kSteps, "the run ended before it could be stopped (%lld steps)",
            static_cast<long long>(stopped_at));
  CHECK(run_named("moved").status == db::RunStatus::kStopped);

  // A layout the model cannot take is refused before anything starts; the run is left as it was.
  const ProcResult bad = cli({"runs", "resume", "moved", "--layout", "tp=3", "--quiet"});
  CHECK_MSG(bad.exit_code == 3 && has(bad.output, "tp"), "exit %d: %s", bad.exit_code, bad.output.c_str());
  CHECK(run_named("moved").status == db::RunStatus::kStopped && steps_of("moved") == stopped_at);
  const ProcResult typo = cli({"runs", "resume", "moved", "--layout", "dp=two"});
  CHECK_MSG(typo.exit_code == 2 && has(typo.output, "--layout"), "exit %d: %s", typo.exit_code,
            typo.output.c_str());

  // On one rank: the same row continues from the stop checkpoint to the end.
  const ProcResult resumed = cli({"runs", "resume", "moved", "--layout", "dp=1"});
  CHECK_MSG(resumed.exit_code == 0, "exit %d: %s", resumed.exit_code, resumed.output.c_str());
  CHECK_MSG(has(resumed.output, "run moved completed"), "%s", resumed.output.c_str());
  int repeats = 0;
  const std::map<int64_t, double> got = losses("moved", &repeats);
  CHECK_MSG(static_cast<int64_t>(got.size()) == kSteps && repeats == 0, "%zu steps stored, %d twice",
            got.size(), repeats);
  const double worst = worst_difference(got, want, 1);
  CHECK_MSG(worst < 1e-4, "losses differ from the uninterrupted 2-rank run by %.3g (relative)", worst);
  {
    const db::Database d(g_root + "/store.db");
    bool recut = false;
    // The worker's own words (engine/train/trainer_checkpoint.cpp): saved on 2 ranks, resumed on 1.
    for (const auto& e : db::list_events(d, run_named("moved").id, 200))
      recut |= has(e.message, "has 2 rank(s), this run has 1") && has(e.message, "re-cut");
    CHECK_MSG(recut, "no re-cut event from 2 ranks to 1 stored for run moved");
    CHECK(run_named("moved").status == db::RunStatus::kCompleted);
  }

  // Its checkpoints are on this machine: listed with their folder, fetched as that folder.
  const ProcResult list = cli({"runs", "checkpoints", "moved", "--json"});
  const auto j = nlohmann::json::parse(list.output, nullptr, false);
  CHECK_MSG(list.exit_code == 0 && j.is_array() && !j.empty(), "%s", list.output.c_str());
  std::string step10_dir;
  if (j.is_array())
    for (const auto& c : j)
      if (c["step"] == 10 && c.contains("local_dir")) step10_dir = c["local_dir"].get<std::string>();
  CHECK_MSG(!step10_dir.empty() && fs::exists(step10_dir + "/MANIFEST"), "%s", list.output.c_str());
  const ProcResult fetched = cli({"runs", "fetch", "moved", "--step", "10"});
  CHECK_MSG(fetched.exit_code == 0 && has(fetched.output, step10_dir), "%s", fetched.output.c_str());
  CHECK(cli({"runs", "fetch", "moved", "--step", "11"}).exit_code == 2);  // not a checkpoint

  // The model of either layout's checkpoint: sampled (no tokenizer: token ids) and exported.
  const ProcResult sampled = cli({"runs", "sample", "moved", "--step", "10", "--tokens", "8"});
  int ids = 0;
  for (size_t at = 0; at < sampled.output.size();) {
    const size_t end = sampled.output.find_first_not_of("0123456789", at);
    if (end != at && (end == std::string::npos || sampled.output[end] == ' ' || sampled.output[end] == '\n'))
      ++ids;
    at = end == std::string::npos ? sampled.output.size() : sampled.output.find_first_of("0123456789", end);
  }
  CHECK_MSG(sampled.exit_code == 0 && ids >= 8, "exit %d: %s", sampled.exit_code, sampled.output.c_str());
  const ProcResult exported = cli({"runs", "export-model", "moved", "--step", "10", "--out", "ex10"});
  CHECK_MSG(exported.exit_code == 0 && fs::exists(g_root + "/ex10/model.safetensors"), "exit %d: %s",
            exported.exit_code, exported.output.c_str());
  CHECK(cli({"runs", "export-model", "moved", "--format", "peft", "--out", "ad"}).exit_code ==
        2);  // no adapter
  // The Export dialog's dtype choice, from the terminal too: an unknown one is refused naming --dtype.
  const ProcResult badDtype = cli({"runs", "export-model", "moved", "--dtype", "fp16", "--out", "ex16"});
  CHECK_MSG(badDtype.exit_code == 2 && badDtype.output.find("--dtype takes source, bf16 or fp32") != std::string::npos,
            "exit %d: %s", badDtype.exit_code, badDtype.output.c_str());

  // A fork from step 10 on one rank: a new run, recorded as the fork, from step 11 on.
  const ProcResult forked =
      cli({"runs", "fork", "moved", "--step", "10", "--name", "branch", "--layout", "dp=1"});
  CHECK_MSG(forked.exit_code == 0, "exit %d: %s", forked.exit_code, forked.output.c_str());
  const db::Run branch = run_named("branch");
  CHECK(branch.parent_id && *branch.parent_id == run_named("moved").id);
  CHECK(branch.status == db::RunStatus::kCompleted);
  const std::map<int64_t, double> child = losses("branch");
  CHECK_MSG(!child.empty() && child.begin()->first == 11 && child.rbegin()->first == kSteps,
            "branch stored steps %lld..%lld",
            child.empty() ? -1LL : static_cast<long long>(child.begin()->first),
            child.empty() ? -1LL : static_cast<long long>(child.rbegin()->first));
  const double fork_worst = worst_difference(child, want, 11);
  CHECK_MSG(fork_worst < 1e-4, "the fork's losses differ from the uninterrupted run by %.3g", fork_worst);
  return summary("test_resume_layout_cli");
}
