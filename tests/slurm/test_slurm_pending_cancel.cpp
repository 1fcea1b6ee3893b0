// Monitoring and cancel on the real loopback Slurm: a run submitted while both nodes are drained
// is stored as queued with its Slurm job PENDING, the scheduler's reason and its place in the queue
// (behind another job of the partition submitted first); once the nodes
// return it runs; Ctrl-C of `flotilla run --cluster` sends TERM to the job's tasks, the worker
// checkpoints and exits 10, and the store says stopped (on request) with the checkpoint recorded;
// the batch script's exit marker records the worker's exit 10. `flotilla runs resume` then submits
// the run again as a new job that continues from that checkpoint, and a second Ctrl-C stops it again.
#include <signal.h>
#include <unistd.h>

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
  if (!j || checkpoints.empty()) return summary("test_slurm_pending_cancel");

  // `flotilla runs resume`: the same batch script submitted again as a new job, which resumes from
  // the stop's checkpoint; every step stays stored once, without a gap.
  const std::string old_job = j->job_id;
  const int64_t stopped_at = checkpoints.back().step;
  const int64_t rows_before = loss_rows(ws.db());
  const std::string log2 = fx.root() + "/resume.log";
  const pid_t resumed = ws.spawn({"runs", "resume", "cancel-me"}, log2);
  bool going = false;
  for (int i = 0; i < 1200 && !going; ++i) {
    usleep(100 * 1000);
    flotilla::db::Database rdb(ws.db());
    going = flotilla::db::get_run(rdb, run->id).status == flotilla::db::RunStatus::kRunning &&
            loss_rows(ws.db()) > rows_before + 3;
  }
  CHECK_MSG(going, "resumed run not running with new steps: %s", read_file(log2).c_str());
  // While it runs, another resume is refused with what to do instead; nothing changes.
  const ProcResult twice = ws.run({"runs", "resume", "cancel-me"});
  CHECK_MSG(twice.exit_code == 9 && contains(twice.output, "flotilla runs attach cancel-me"), "exit %d: %s",
            twice.exit_code, twice.output.c_str());
  kill(resumed, SIGINT);
  const int resumed_exit = wait_exit(resumed);
  const std::string out2 = read_file(log2);
  CHECK_MSG(resumed_exit == 10, "exit %d: %s", resumed_exit, out2.c_str());
  CHECK_MSG(contains(out2, "resumed as slurm job") && contains(out2, "(was job " + old_job + ")"), "%s", out2.c_str());
  {
    flotilla::db::Database rdb(ws.db());
    const flotilla::db::Run after = flotilla::db::get_run(rdb, run->id);
    CHECK_MSG(after.status == flotilla::db::RunStatus::kStopped, "status %s", flotilla::db::to_string(after.status));
    const auto job = flotilla::db::find_slurm_job(rdb, run->id);
    CHECK(job && job->job_id != old_job && job->restarts == 0);
    flotilla::db::Stmt st(rdb,
                          "SELECT COUNT(*), COUNT(DISTINCT step), MAX(step) FROM metrics WHERE run_id = ?1 AND "
                          "name = 'loss'");
    st.bind(1, run->id);
    CHECK(st.step());
    CHECK_MSG(st.i64(0) == st.i64(1) && st.i64(2) == st.i64(0) && st.i64(2) > stopped_at,
              "%lld rows, %lld steps, last %lld (stopped at %lld)", static_cast<long long>(st.i64(0)),
              static_cast<long long>(st.i64(1)), static_cast<long long>(st.i64(2)), static_cast<long long>(stopped_at));
    flotilla::db::Stmt ev(rdb, "SELECT COUNT(*) FROM events WHERE run_id = ?1 AND kind = 'resume'");
    ev.bind(1, run->id);
    CHECK(ev.step() && ev.i64(0) == 1);
    // The first attempt's marker is kept beside the new job's.
    CHECK(contains(read_file(j->run_dir + "/slurm-exit." + old_job), "exit=10 restarts=0"));
    const std::string marker = read_file(j->run_dir + "/slurm-exit");
    CHECK_MSG(contains(marker, "exit=10 restarts=0") && marker.find('\n') == marker.size() - 1, "marker: %s",
              marker.c_str());
  }
  return summary("test_slurm_pending_cancel");
}
