// `flotilla runs resume RUN --layout dp=1` for a run on SSH nodes, over loopback sshd nodes with the
// real worker and the real flotilla command: a 2-rank run over nodes a and b (dp=2, one rank each)
// stopped with Ctrl-C resumes in the same row on 1 rank; every step is stored once, the losses are
// those of one uninterrupted 2-rank run on this machine (the checkpoint re-cut, the global batch
// kept), the stored config and world size say the new layout, and the worker's re-cut event is
// stored with the run. Then another such run moves: `runs resume RUN --local --layout dp=1` continues
// it on this machine, in the same row, from the checkpoint fetched from its master.
#include <signal.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "check.h"
#include "cli_fixture.h"
#include "db/database.h"
#include "db/queries.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "engine/config/config_io.h"
#include "worker_run.h"

using namespace flotilla_test;
namespace db = flotilla::db;

namespace {

constexpr int64_t kSteps = 2000;  // a few ms a step: the stop lands long before the end

std::string config_text() {
  return "[run]\nname = \"mv\"\nseed = 7\nthreads = 1\n"
         "[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\nn_embd = 32\nvocab_size = 128\nmax_seq_len "
         "= 32\n"
         "[data]\nsynthetic_tokens = 300000\n"  // one epoch is 4687 steps: see 32-cli.md
         "[train]\nsteps = " +
         std::to_string(kSteps) +
         "\nmicro_batch = 2\nseq_len = 16\n"
         "[parallel]\ndp = 2\ntimeout_s = 60\n"
         "[checkpoint]\nevery = 1000000\n";
}

std::map<int64_t, double> stored_losses(const std::string& path, const std::string& run, int* repeats) {
  const db::Database d(path);
  std::map<int64_t, double> out;
  *repeats = 0;
  const auto r = db::find_run(d, run);
  if (!r) return out;  // not created yet
  for (const db::Point& p : db::metric_points(d, r->id, "loss")) {
    if (out.count(p.step)) ++*repeats;
    out[p.step] = p.value;
  }
  return out;
}

}  // namespace

int main() {
  if (const std::string why = SshdFixture::unavailable(); !why.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return 0;
  }
  SshdFixture fx("resume_layout_ssh");
  if (!fx.start(0) || !fx.start(1)) {
    std::printf("SKIP: sshd cannot run as this user here: %s\n", fx.last_error().c_str());
    return 0;
  }
  CliWorkspace ws(fx.root());
  CHECK_MSG(ws.add_trusted_node(fx, 0, "a"), "node a");
  CHECK_MSG(ws.add_trusted_node(fx, 1, "b"), "node b");
  const std::string cfg = fx.root() + "/mv.toml";
  write_text(cfg, config_text());

  // The reference: the same config on this machine, 2 ranks, never interrupted.
  const std::string local_dir = fx.root() + "/local";
  const ProcResult local = run_worker({"launch", "--nproc-per-node", "2", "--master-port", "0", "--no-bind",
                                       "--", "train", "--config", cfg, "--out-dir", local_dir},
                                      {"OMP_NUM_THREADS=1"});
  CHECK_MSG(local.exit_code == 0, "%s", local.output.c_str());
  std::map<int64_t, double> want;
  for (const auto& [step, loss] : step_losses(local_dir)) want[step] = loss;
  CHECK(static_cast<int64_t>(want.size()) == kSteps);

  // On nodes a and b, one rank each; Ctrl-C once 20 steps are stored: a checkpoint, exit 10.
  const std::string log = fx.root() + "/run.log";
  const pid_t run = ws.spawn({"run", cfg, "--nodes", "a,b", "--no-bind"}, log);
  int repeats = 0;
  CHECK(wait_until([&] { return stored_losses(ws.db(), "mv", &repeats).size() >= 20; }, 120));
  ::kill(run, SIGINT);
  const int stop_exit = wait_exit(run);
  CHECK_MSG(stop_exit == 10, "exit %d: %s", stop_exit, read_file(log).c_str());
  const size_t stopped_at = stored_losses(ws.db(), "mv", &repeats).size();
  CHECK_MSG(stopped_at < static_cast<size_t>(kSteps), "the run ended before it could be stopped");
  CHECK(db::get_run(db::Database(ws.db()), "mv").status == db::RunStatus::kStopped);

  // The same row, on 1 rank, to its end.
  const ProcResult resumed = ws.run({"runs", "resume", "mv", "--layout", "dp=1", "--no-bind"});
  CHECK_MSG(resumed.exit_code == 0, "exit %d: %s", resumed.exit_code, resumed.output.c_str());
  const std::map<int64_t, double> got = stored_losses(ws.db(), "mv", &repeats);
  CHECK_MSG(static_cast<int64_t>(got.size()) == kSteps && repeats == 0, "%zu steps stored, %d twice",
            got.size(), repeats);
  double worst = 0;
  for (const auto& [step, loss] : want) {
    const auto it = got.find(step);
    worst = it == got.end() ? INFINITY
                            : std::max(worst, std::fabs(it->second - loss) / std::max(1e-6, std::fabs(loss)));
  }
  for (const auto& [step, loss] : want) {
    const auto it = got.find(step);
    if (it != got.end() && std::fabs(it->second - loss) > 1e-4 * std::fabs(loss)) {
      std::printf("first difference at step %lld (stopped after %zu): %.6f stored, %.6f uninterrupted\n",
                  static_cast<long long>(step), stopped_at, it->second, loss);
      break;
    }
  }
  CHECK_MSG(worst < 1e-4, "losses differ from the uninterrupted 2-rank run by %.3g (relative)", worst);
  {
    const db::Database d(ws.db());
    const db::Run r = db::get_run(d, "mv");
    CHECK(r.status == db::RunStatus::kCompleted);
    CHECK_MSG(r.world_size && *r.world_size == 1, "world %lld",
              static_cast<long long>(r.world_size.value_or(0)));
    CHECK(flotilla::parse_config_toml(r.config_toml, "t").parallel.dp == 1);
    bool recut = false;
    for (const auto& e : db::list_events(d, r.id, 500))
      recut |= e.message.find("has 2 rank(s), this run has 1") != std::string::npos;
    CHECK_MSG(recut, "no re-cut event from 2 ranks to 1 stored for run mv");
  }

  // Another run on a,b, stopped, then resumed on this machine on 1 rank.
  const std::string log2 = fx.root() + "/run2.log";
  const pid_t run2 = ws.spawn({"run", cfg, "--nodes", "a,b", "--no-bind", "--name", "mv2"}, log2);
  CHECK(wait_until([&] { return stored_losses(ws.db(), "mv2", &repeats).size() >= 20; }, 120));
  ::kill(run2, SIGINT);
  CHECK_MSG(wait_exit(run2) == 10, "%s", read_file(log2).c_str());
  CHECK(stored_losses(ws.db(), "mv2", &repeats).size() < static_cast<size_t>(kSteps));
  // A folder of the same name here, another run's (another workspace's mv2, a finished run): the
  // move must not take its checkpoints or its metrics.jsonl.
  const std::filesystem::path foreign = std::filesystem::current_path() / "runs" / "mv2";
  std::filesystem::remove_all(foreign);
  std::filesystem::create_directories(foreign / "checkpoints" / "step-00002000");
  write_text((foreign / "run.toml").string(), "[run]\nname = \"mv2\"\n");
  const std::string foreign_metrics = "{\"v\":1,\"type\":\"step\",\"rank\":0,\"step\":1999,\"loss\":9.5}\n";
  write_text((foreign / "metrics.jsonl").string(), foreign_metrics);
  const ProcResult moved = ws.run({"runs", "resume", "mv2", "--local", "--layout", "dp=1", "--quiet"});
  CHECK_MSG(read_file((foreign / "metrics.jsonl").string()) == foreign_metrics,
            "the move wrote into another run's folder %s", foreign.c_str());
  CHECK_MSG(moved.exit_code == 0, "exit %d: %s", moved.exit_code, moved.output.c_str());
  const std::map<int64_t, double> got2 = stored_losses(ws.db(), "mv2", &repeats);
  CHECK_MSG(static_cast<int64_t>(got2.size()) == kSteps && repeats == 0, "%zu steps stored, %d twice",
            got2.size(), repeats);
  double worst2 = 0;
  for (const auto& [step, loss] : want) {
    const auto it = got2.find(step);
    worst2 = it == got2.end()
                 ? INFINITY
                 : std::max(worst2, std::fabs(it->second - loss) / std::max(1e-6, std::fabs(loss)));
  }
  CHECK_MSG(worst2 < 1e-4, "moved run: losses differ from the uninterrupted 2-rank run by %.3g", worst2);
  {
    const db::Run r = db::get_run(db::Database(ws.db()), "mv2");
    CHECK(r.status == db::RunStatus::kCompleted);
    CHECK_MSG(std::filesystem::exists(r.run_dir + "/metrics.jsonl"), "run dir %s is not on this machine",
              r.run_dir.c_str());
    CHECK_MSG(r.run_dir != foreign.string(), "run mv2 moved into another run's folder %s", r.run_dir.c_str());
    CHECK(flotilla::parse_config_toml(r.config_toml, "t").parallel.dp == 1);
  }
  return summary("test_resume_layout_cli_ssh");
}
