// Resuming an ended Slurm run (see slurm_run.h): the stored batch script submitted again as a new job.
#include "runs/slurm_run.h"

#include <string>

#include "db/clusters.h"
#include "db/run_store.h"
#include "engine/core/error.h"
#include "remote/slurm_cluster.h"
#include "remote/validate.h"
#include "runs/run_status.h"
#include "runs/slurm_login.h"

namespace flotilla::runs {

using detail::on_login;

std::string slurm_resume_target(const db::Database& db, const db::Run& run, db::SlurmCluster& cluster) {
  if (!is_slurm_run(run)) return "run " + run.name + " is not a Slurm run";
  const auto job = db::find_slurm_job(db, run.id);
  if (!job)
    return "run " + run.name + " was never submitted (no Slurm job recorded): start its configuration again";
  switch (run.status) {
    case db::RunStatus::kQueued:
    case db::RunStatus::kRunning:
    case db::RunStatus::kPreempted:
      return "run " + run.name + " is " + db::to_string(run.status) + " (slurm job " + job->job_id +
             "): watch it with flotilla runs attach " + run.name;
    case db::RunStatus::kCompleted:
      return "run " + run.name + " has completed: there is nothing to resume";
    case db::RunStatus::kCreated:
      return "run " + run.name + " was never submitted: start its configuration again";
    case db::RunStatus::kStopped:
    case db::RunStatus::kFailed:
    case db::RunStatus::kPaused:
      break;
  }
  for (const auto& c : db::list_clusters(db))
    if (c.id == job->cluster_id) {
      cluster = c;
      return "";
    }
  return "the cluster of run " + run.name + " is no longer stored";
}

namespace {

// The value of `name='...'` in a generated batch script (remote::batch_script single-quotes it).
std::string script_value(const std::string& script, const std::string& name) {
  const std::string key = "\n" + name + "='";
  const size_t at = script.find(key);
  if (at == std::string::npos) return "";
  const size_t from = at + key.size(), to = script.find("'\n", from);
  return to == std::string::npos ? "" : script.substr(from, to - from);
}

}  // namespace

SlurmWatch resubmit_slurm_run(db::Database& db, remote::Session& login, const db::Run& run,
                              const std::string& origin, const Note& note) {
  db::SlurmCluster cluster;
  if (const std::string why = slurm_resume_target(db, run, cluster); !why.empty()) throw Error(ExitCode::kUsage, why);
  const db::SlurmJob job = *db::find_slurm_job(db, run.id);
  const auto queued = on_login(login, note, [&](remote::Session& s) { return remote::poll_jobs(s, {job.job_id}); });
  if (!queued.empty())
    throw Error(ExitCode::kUsage, "slurm job " + job.job_id + " of run " + run.name + " is still in the queue (" +
                                      queued.front().state + "): wait for it to leave, or watch it with flotilla "
                                      "runs attach " + run.name);
  const std::string worker = script_value(job.script, "worker"), config = script_value(job.script, "config");
  const remote::ExecResult there = on_login(login, note, [&](remote::Session& s) {
    return s.exec("test -x " + remote::shell_quote(worker) + " && test -f " + remote::shell_quote(config) +
                      " && test -d " + remote::shell_quote(job.run_dir),
                  30);
  });
  if (worker.empty() || config.empty() || there.exit_status != 0)
    throw Error(ExitCode::kConfig, "run " + run.name + " cannot be resumed on cluster " + cluster.name +
                                       ": the worker it ran (" + worker + "), its config or its folder " +
                                       job.run_dir + " is no longer there; start its configuration again");
  // The previous attempt's exit marker stays beside, under its job's id: the watch reads the new
  // job's marker, or none.
  on_login(login, note, [&](remote::Session& s) {
    const std::string marker = job.run_dir + "/slurm-exit";
    return s.exec("if [ -f " + remote::shell_quote(marker) + " ]; then mv -f " + remote::shell_quote(marker) + " " +
                      remote::shell_quote(marker + "." + job.job_id) + "; fi",
                  30);
  });
  on_login(login, note, [&](remote::Session& s) {
    remote::write_remote_file(s, job.run_dir + "/job.sh", job.script);
    return 0;
  });
  const std::string id =
      on_login(login, note, [&](remote::Session& s) { return remote::submit_batch(s, job.run_dir + "/job.sh"); });
  if (note)
    note("cluster " + cluster.name + ": resubmitted run " + run.name + " as job " + id + " (was job " + job.job_id +
         "); it resumes from its newest verified checkpoint");
  const double now = db::now_seconds();
  db::write_tx(db, [&] {
    db::resubmit_slurm_job(db, run.id, id, now);
    record_queued(db, run.id, now,
                   origin + ": slurm job " + id + " on cluster " + cluster.name + " (resumed; was job " +
                       job.job_id + ")");
    db::add_event(db, run.id, now, "resume", "info",
                  "resubmitted as slurm job " + id + " (was job " + job.job_id +
                      "): it resumes from its newest verified checkpoint");
  });
  SlurmWatch w;
  if (const std::string why = slurm_attach_target(db, db::get_run(db, run.id), w, cluster); !why.empty())
    throw Error(ExitCode::kComm, why);
  return w;
}

}  // namespace flotilla::runs
