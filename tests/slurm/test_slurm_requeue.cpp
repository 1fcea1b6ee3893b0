// The time-limit path on the real loopback Slurm, with auto-resume: the batch shell gets the lead
// signal (USR1, as `--signal=B:USR1@LEAD` delivers it; sent here with `scancel --signal=USR1
// --batch` so the test does not wait for Slurm's periodic time-limit check), the tasks get TERM,
// checkpoint and exit 10, the script requeues the job (same id, SLURM_RESTART_COUNT 1), the worker
// resumes from its newest verified checkpoint, and the run completes with every loss equal to the
// same run launched locally without any interruption. The store shows queued -> running ->
// preempted -> queued -> running -> completed, a restart event, restarts = 1, and one loss row per
// step (the steps re-run after the resume replace theirs). The first watcher is SIGKILLed right
// after the signal and `flotilla runs attach` finishes the watch: nothing lost, nothing twice. Slow: a
// requeue waits for the job's new begin time (cred_expire=10 s on the fixture; about 2 minutes by default).
#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "check.h"
#include "db/clusters.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "db/sql.h"
#include "slurm_fixture.h"

using namespace flotilla_test;

namespace {

constexpr int kSteps = 3000;

std::map<int64_t, double> stored_losses(const std::string& db_path, int& rows) {
  flotilla::db::Database db(db_path);
  flotilla::db::Stmt st(db, "SELECT step, value FROM metrics WHERE name = 'loss' ORDER BY step");
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
  SshdFixture fx("slurm_requeue");
  if (const std::string w = start_login_node(fx, conf); !w.empty()) {
    std::printf("SKIP: %s\n", w.c_str());
    return kSkipExit;
  }
  const std::string cfg = fx.root() + "/run.toml";
  write_text(cfg,
             "[run]\nname = \"requeue\"\nseed = 7\nthreads = 1\n"
             "[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\nn_embd = 32\nvocab_size = "
             "128\nmax_seq_len = 32\n"
             "[data]\nsynthetic_tokens = 30000\n"
             "[train]\nsteps = " +
                 std::to_string(kSteps) +
                 "\nmicro_batch = 2\nseq_len = 16\n"
                 "[parallel]\ndp = 2\nzero = 1\ntimeout_s = 60\n"
                 "[checkpoint]\nevery = 1000\nkeep_last = 3\n");
  const std::string ref = fx.root() + "/ref";
  const pid_t local = spawn({FLOTILLA_WORKER_PATH, "launch", "--nproc-per-node", "2", "--master-port", "0",
                             "--no-bind", "--", "train", "--config", cfg, "--out-dir", ref},
                            {"OMP_NUM_THREADS=1"}, ref + ".log");
  CHECK_MSG(wait_exit(local) == 0, "%s", read_file(ref + ".log").c_str());
  const auto ref_losses = step_losses(ref);

  CliWorkspace ws(fx.root());
  CHECK(ws.run({"clusters", "add", "flo", "--login", "127.0.0.1", "--port", std::to_string(fx.node(0).port),
                "--user", local_user_name(), "--key", fx.client_key()})
            .exit_code == 0);
  const std::string fp = fingerprint_in(ws.run({"clusters", "probe", "flo"}).output);
  CHECK(ws.run({"clusters", "trust", "flo", "--fingerprint", fp}).exit_code == 0);
  const std::string log = fx.root() + "/run.log";
  const pid_t cli =
      ws.spawn({"run", cfg, "--cluster", "flo", "--nodes", "2", "--time", "00:10:00", "--auto-resume"}, log);

  std::string job_id;
  const bool mid_run = wait_until(
      [&] {
        int rows = 0;
        if (stored_losses(ws.db(), rows).size() < 300) return false;
        flotilla::db::Database db(ws.db());
        const auto run = flotilla::db::find_run(db, "requeue");
        const auto j = run ? flotilla::db::find_slurm_job(db, run->id) : std::nullopt;
        if (j) job_id = j->job_id;
        return j.has_value();
      },
      90);
  CHECK_MSG(mid_run && !job_id.empty(), "no steps: %s", read_file(log).c_str());
  const std::string signal = "SLURM_CONF=" + conf + " scancel --signal=USR1 --batch " + job_id;
  CHECK(system(signal.c_str()) == 0);

  // The watcher dies (as an app would on a crash) while the job checkpoints and requeues itself;
  // `runs attach` picks it up again from the committed offset.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  kill(cli, SIGKILL);
  wait_exit(cli);
  const ProcResult attached = ws.run({"runs", "attach", "requeue"});
  const int exit_code = attached.exit_code;
  const std::string out = read_file(log) + attached.output;
  CHECK_MSG(contains(attached.output, "attached to run requeue: slurm job " + job_id), "%s",
            attached.output.c_str());
  CHECK_MSG(exit_code == 0, "exit %d: %s", exit_code, out.c_str());
  flotilla::db::Database db(ws.db());
  const auto run = flotilla::db::find_run(db, "requeue");
  CHECK(run.has_value());
  if (!run) return summary("test_slurm_requeue");
  CHECK_MSG(run->status == flotilla::db::RunStatus::kCompleted, "status %s: %s",
            flotilla::db::to_string(run->status), out.c_str());
  const auto j = flotilla::db::find_slurm_job(db, run->id);
  CHECK(j && j->restarts == 1 && j->job_id == job_id && j->state == "COMPLETED");
  if (j) {
    const std::string marker = read_file(j->run_dir + "/slurm-exit");
    CHECK_MSG(contains(marker, "exit=10 restarts=0") && contains(marker, "reason=time-limit") &&
                  contains(marker, "exit=0 restarts=1"),
              "marker: %s", marker.c_str());
  }
  std::string statuses, restart_events;
  for (const auto& e : flotilla::db::list_events(db, run->id)) {
    if (e.kind == "status") statuses += e.message + "\n";
    if (e.kind == "restart") restart_events += e.message + "\n";
  }
  CHECK_MSG(contains(statuses, "preempted") && contains(statuses, "requeued"), "%s", statuses.c_str());
  CHECK_MSG(contains(restart_events, "restart 1"), "%s", restart_events.c_str());

  int rows = 0;
  const auto losses = stored_losses(ws.db(), rows);
  CHECK_MSG(rows == kSteps, "%d loss rows for %d steps", rows, kSteps);
  int equal = 0;
  for (const auto& [step, loss] : ref_losses) {
    const auto it = losses.find(step);
    if (it != losses.end() && static_cast<float>(it->second) == loss) ++equal;
  }
  CHECK_MSG(equal == kSteps, "%d of %d losses equal the uninterrupted local run", equal, kSteps);
  std::printf("%d of %d losses equal the uninterrupted local run after a requeue\n", equal, kSteps);
  return summary("test_slurm_requeue");
}
