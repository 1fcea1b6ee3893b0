// Monitoring and cancel on the real loopback Slurm: a run submitted while both nodes are drained
// is stored as queued with its Slurm job PENDING, the scheduler's reason and its place in the queue
// (behind another job of the partition submitted first); once the nodes
// return it runs; Ctrl-C of `flotilla run --cluster` sends TERM to the job's tasks, the worker
// checkpoints and exits 10, and the store says stopped (on request) with the checkpoint recorded;
// the batch script's exit marker records the worker's exit 10.
#include <signal.h>

#include <cstdlib>
#include <string>

#include "check.h"
#include "db/clusters.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "db/sql.h"
#include "slurm_fixture.h"

using namespace flotilla_test;

namespace {

int64_t loss_rows(const std::string& db_path) {
  flotilla::db::Database db(db_path);
  flotilla::db::Stmt st(db, "SELECT COUNT(*) FROM metrics WHERE name = 'loss'");
  return st.step() ? st.i64(0) : 0;
}

}  // namespace

int main() {
  std::string why;
  const std::string conf = fixture_slurm_conf(why);
  if (conf.empty()) {
    std::printf("SKIP: %s\n", why.c_str());
    return kSkipExit;
  }
  SshdFixture fx("slurm_pending_cancel");
  if (const std::string w = start_login_node(fx, conf); !w.empty()) {
    std::printf("SKIP: %s\n", w.c_str());
    return kSkipExit;
  }
  const std::string cfg = fx.root() + "/run.toml";
  write_text(cfg,
             "[run]\nname = \"cancel-me\"\nseed = 5\nthreads = 1\n"
             "[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\nn_embd = 32\nvocab_size = "
             "128\nmax_seq_len = 32\n"
             "[data]\nsynthetic_tokens = 30000\n"
             "[train]\nsteps = 200000\nmicro_batch = 2\nseq_len = 16\n"
             "[parallel]\ndp = 2\nzero = 1\ntimeout_s = 60\n"
             "[checkpoint]\nevery = 100000\nkeep_last = 2\n");
  CliWorkspace ws(fx.root());
  const std::string added = add_trusted_cluster(ws, fx, "flo");
  CHECK_MSG(added.empty(), "%s", added.c_str());

  const std::string scontrol = "SLURM_CONF=" + conf + " scontrol ";
  CHECK(system((scontrol + "update nodename=n[1-2] state=drain reason=flotilla-test").c_str()) == 0);
  // A job of someone else's, submitted first, waits ahead of ours in the same partition.
  CHECK(system(("SLURM_CONF=" + conf + " sbatch -Q -N 2 -t 1 -o /dev/null -J other --wrap 'sleep 1'").c_str()) == 0);
  const std::string log = fx.root() + "/run.log";
  const pid_t cli = ws.spawn({"run", cfg, "--cluster", "flo", "--nodes", "2", "--time", "00:10:00"}, log);

  // Pending: queued in the store, the job PENDING with the scheduler's reason.
  flotilla::db::SlurmJob job;
  const bool pending = wait_until(
      [&] {
        flotilla::db::Database db(ws.db());
        const auto run = flotilla::db::find_run(db, "cancel-me");
        if (!run) return false;
        const auto j = flotilla::db::find_slurm_job(db, run->id);
        if (!j || j->state != "PENDING" || j->reason.empty()) return false;
        job = *j;
        return run->status == flotilla::db::RunStatus::kQueued;
      },
      30);
  CHECK_MSG(pending, "no pending job recorded: %s", read_file(log).c_str());
  std::printf("pending reason: %s\n", job.reason.c_str());
  // The note follows the store's row (it asks for the queue place first).
  CHECK_MSG(wait_until([&] { return contains(read_file(log), "pending: "); }, 10), "%s", read_file(log).c_str());
  CHECK_MSG(contains(read_file(log), "· 1 job ahead in partition cpu"), "%s", read_file(log).c_str());

  // The nodes come back: the job runs and metrics arrive. The metrics tail can store steps before
  // the next squeue poll records the state (seen in CI under load: 50 steps stored while the run
  // still read queued), so wait for both.
  CHECK(system((scontrol + "update nodename=n[1-2] state=resume").c_str()) == 0);
  const bool running = wait_until(
      [&] {
        if (loss_rows(ws.db()) < 50) return false;
        flotilla::db::Database db(ws.db());
        const auto run = flotilla::db::find_run(db, "cancel-me");
        const auto j = run ? flotilla::db::find_slurm_job(db, run->id) : std::nullopt;
        return run && run->status == flotilla::db::RunStatus::kRunning && j && j->state == "RUNNING";
      },
      60);
  CHECK_MSG(running, "no steps stored while running: %s", read_file(log).c_str());
  {
    flotilla::db::Database db(ws.db());
    const auto run = flotilla::db::find_run(db, "cancel-me");
    CHECK(run && run->status == flotilla::db::RunStatus::kRunning);
    const auto j = flotilla::db::find_slurm_job(db, run->id);
    CHECK(j && j->state == "RUNNING" && j->reason.empty());
  }

  // Ctrl-C: scancel (TERM to the batch shell and the tasks): checkpoint, exit 10, stopped.
  kill(cli, SIGINT);
  const int exit_code = wait_exit(cli);
  const std::string out = read_file(log);
  CHECK_MSG(exit_code == 10, "exit %d: %s", exit_code, out.c_str());
  CHECK(contains(out, "cancelling job"));
  flotilla::db::Database db(ws.db());
  const auto run = flotilla::db::find_run(db, "cancel-me");
  CHECK(run.has_value());
  if (!run) return summary("test_slurm_pending_cancel");
  CHECK_MSG(run->status == flotilla::db::RunStatus::kStopped, "status %s",
            flotilla::db::to_string(run->status));
  const auto checkpoints = flotilla::db::list_checkpoints(db, run->id);
  CHECK_MSG(!checkpoints.empty(), "no checkpoint recorded on cancel");
  const auto j = flotilla::db::find_slurm_job(db, run->id);
  CHECK(j.has_value());
  if (j) {
    const std::string marker = read_file(j->run_dir + "/slurm-exit");
    CHECK_MSG(contains(marker, "exit=10 restarts=0"), "marker: %s", marker.c_str());
    std::printf("job %s ended %s\n", j->job_id.c_str(), j->state.c_str());
  }
  return summary("test_slurm_pending_cancel");
}
