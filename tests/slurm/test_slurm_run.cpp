// `flotilla run CONFIG --cluster NAME --nodes 2` on the real loopback Slurm: a 2-node CPU run over
// Gloo, one flotilla-worker per task started by srun, ranks and MASTER_ADDR from Slurm's
// environment only. Its losses, tailed into the store by byte offset over the login node's SSH
// session, equal the same run launched locally with two ranks, step for step and bit for bit; the
// store records the run as queued then running then completed, its Slurm job (id, COMPLETED, the
// batch script) and no duplicate step. Accounting is off on the fixture, so the end comes from the
// job's exit marker and `scontrol show job`. Priced per CPU task-hour on its partition, the run's
// spend is that price x its running time, listed in costs by run and by cluster.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "check.h"
#include "db/clusters.h"
#include "db/costs.h"
#include "db/queries.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "db/sql.h"
#include "slurm_fixture.h"

using namespace flotilla_test;

namespace {

constexpr int kSteps = 40;

std::string config_text(const std::string& name) {
  return "[run]\nname = \"" + name +
         "\"\nseed = 11\nthreads = 1\n"
         "[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\nn_embd = 32\nvocab_size = 128\nmax_seq_len "
         "= 32\n"
         "[data]\nsynthetic_tokens = 30000\n"
         "[train]\nsteps = " +
         std::to_string(kSteps) +
         "\nmicro_batch = 2\nseq_len = 16\n"
         "[parallel]\ndp = 2\nzero = 1\ntimeout_s = 60\n"
         "[checkpoint]\nevery = 20\nkeep_last = 2\n";
}

std::map<int64_t, double> stored_losses(const std::string& db_path, int64_t run_id, int& rows) {
  flotilla::db::Database db(db_path);
  flotilla::db::Stmt st(db,
                        "SELECT step, value FROM metrics WHERE run_id = ?1 AND name = 'loss' ORDER BY step");
  st.bind(1, run_id);
  std::map<int64_t, double> out;
  rows = 0;
  while (st.step()) {
    out[st.i64(0)] = st.f64(1);
    ++rows;
  }
  return out;
}

}  // namespace

int main() {
  std::string why;
  const std::string conf = fixture_slurm_conf(why);
  if (conf.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return kSkipExit;
  }
  SshdFixture fx("slurm_run");
  if (const std::string w = start_login_node(fx, conf); !w.empty()) {
    std::printf("SKIP: %s\n", w.c_str());
    return kSkipExit;
  }
  const std::string cfg = fx.root() + "/run.toml";
  write_text(cfg, config_text("slurm2"));

  // The local reference: one launch with two ranks.
  const std::string ref = fx.root() + "/ref";
  const pid_t local = spawn({FLOTILLA_WORKER_PATH, "launch", "--nproc-per-node", "2", "--master-port", "0",
                             "--no-bind", "--", "train", "--config", cfg, "--out-dir", ref},
                            {"OMP_NUM_THREADS=1"}, ref + ".log");
  CHECK_MSG(wait_exit(local) == 0, "%s", read_file(ref + ".log").c_str());
  const auto ref_losses = step_losses(ref);
  CHECK(static_cast<int>(ref_losses.size()) == kSteps);

  CliWorkspace ws(fx.root());
  ProcResult r =
      ws.run({"clusters", "add", "flo", "--login", "127.0.0.1", "--port", std::to_string(fx.node(0).port),
              "--user", local_user_name(), "--key", fx.client_key()});
  CHECK_MSG(r.exit_code == 0, "%s", r.output.c_str());
  const std::string fp = fingerprint_in(ws.run({"clusters", "probe", "flo"}).output);
  CHECK(ws.run({"clusters", "trust", "flo", "--fingerprint", fp}).exit_code == 0);

  // A hostile partition given at submit time: refused before anything is stored or submitted.
  const std::string canary = fx.root() + "/pwned";
  r = ws.run({"run", cfg, "--cluster", "flo", "--nodes", "2", "--partition", "cpu;touch " + canary});
  CHECK_MSG(r.exit_code == 2 && contains(r.output, "partition"), "exit %d: %s", r.exit_code,
            r.output.c_str());
  r = ws.run({"run", cfg, "--cluster", "flo", "--nodes", "2", "--time", "UNLIMITED"});
  CHECK_MSG(r.exit_code == 2 && contains(r.output, "time limit"), "exit %d: %s", r.exit_code,
            r.output.c_str());
  CHECK(!std::filesystem::exists(canary));
  {
    flotilla::db::Database db(ws.db());
    CHECK(flotilla::db::list_runs(db).empty());
  }

  // Priced per CPU task-hour: 2 tasks x $36/h = $72/h while the job runs.
  CHECK(ws.run({"clusters", "price", "flo", "cpu", "--cpu-hour", "36"}).exit_code == 0);
  r = ws.run({"run", cfg, "--cluster", "flo", "--nodes", "2", "--time", "00:10:00", "--partition", "cpu"});
  CHECK_MSG(r.exit_code == 0, "run --cluster: exit %d: %s", r.exit_code, r.output.c_str());
  CHECK(contains(r.output, "slurm job "));
  CHECK(contains(r.output, "completed"));

  flotilla::db::Database db(ws.db());
  const auto run = flotilla::db::find_run(db, "slurm2");
  CHECK(run.has_value());
  if (!run) return summary("test_slurm_run");
  CHECK(run->status == flotilla::db::RunStatus::kCompleted);
  CHECK(run->target == "slurm:flo");
  const auto job = flotilla::db::find_slurm_job(db, run->id);
  CHECK(job.has_value());
  if (job) {
    CHECK_MSG(job->state == "COMPLETED", "job state %s", job->state.c_str());
    CHECK(job->nodes == 2 && job->tasks_per_node == 1 && job->partition == "cpu");
    CHECK(contains(job->script, "#SBATCH --nodes=2") && contains(job->script, "#SBATCH --partition=cpu"));
    CHECK(contains(read_file(job->run_dir + "/slurm-exit"), "exit=0 restarts=0"));
    // Both tasks ran as ranks of one world (the shared file system is this machine's).
    const std::string log = read_file(job->run_dir + "/slurm.out");
    CHECK_MSG(contains(log, "attempt 0 on n[1-2]"), "%s", log.c_str());
  }
  // queued -> running -> completed, as events.
  std::string statuses;
  for (const auto& e : flotilla::db::list_events(db, run->id))
    if (e.kind == "status") statuses += e.message + "\n";
  CHECK_MSG(contains(statuses, "queued") && contains(statuses, "running") && contains(statuses, "completed"),
            "%s", statuses.c_str());

  // Costs: the run's price from the partition, spend = price x running time (not the pending time).
  CHECK_MSG(run->usd_per_hour && *run->usd_per_hour == 72.0, "usd_per_hour %g",
            run->usd_per_hour.value_or(-1));
  const double running_s = flotilla::db::run_running_seconds(db, run->id);
  const double spent = flotilla::db::run_cost_usd(db, run->id);
  CHECK_MSG(running_s > 0 && spent > 0, "running %.3f s, spent $%.6f", running_s, spent);
  CHECK_NEAR(spent, 72.0 * running_s / 3600.0, 1e-9);
  bool listed = false;
  for (const auto& line : flotilla::db::costs_by_run(db))
    if (line.key == "slurm2" && line.usd > 0 && std::abs(line.gpu_hours - 2 * running_s / 3600.0) < 1e-9)
      listed = true;
  CHECK_MSG(listed, "the Slurm run is not in costs by run with 2 allocated CPUs' device-hours");
  // Compare's figures are the same ones (run_summary): CPU-h of the 2 allocated CPUs, the spend.
  const flotilla::db::RunSummary summary_row = flotilla::db::run_summary(db, run->id);
  CHECK_NEAR(summary_row.gpu_hours, 2 * running_s / 3600.0, 1e-9);
  CHECK_NEAR(summary_row.cost_usd.value_or(-1), spent, 1e-9);
  CHECK(!summary_row.on_gpus);
  bool by_cluster = false;
  for (const auto& line : flotilla::db::costs_by_node(db))
    if (line.key == "flo" && line.usd > 0) by_cluster = true;
  CHECK(by_cluster);
  std::printf("ran %.2f s, $%.5f at $72/h\n", running_s, spent);

  int rows = 0;
  const auto losses = stored_losses(ws.db(), run->id, rows);
  CHECK_MSG(rows == kSteps, "%d loss rows", rows);
  int equal = 0;
  for (const auto& [step, loss] : ref_losses) {
    const auto it = losses.find(step);
    if (it != losses.end() && static_cast<float>(it->second) == loss) ++equal;
  }
  CHECK_MSG(equal == kSteps, "%d of %d losses equal the local 2-rank run", equal, kSteps);
  std::printf("%d of %d losses equal the local 2-rank run\n", equal, kSteps);
  return summary("test_slurm_run");
}
