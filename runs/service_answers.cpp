// The runs service (see service.h), continued: the answers a front end shows without asking what
// kind of run it holds (what a run can do now and why not, where it runs, its folder, the placement
// to offer back), and what every command and the app's start do first (settle stale runs, find the
// runs to re-attach).
#include <sstream>

#include "db/clusters.h"
#include "db/database.h"
#include "db/errors.h"
#include "db/queries.h"
#include "db/run_store.h"
#include "runs/process.h"
#include "runs/run_status.h"
#include "runs/service.h"
#include "runs/service_internal.h"
#include "runs/stale_runs.h"

namespace flotilla::runs {

using namespace service_detail;

Abilities RunService::abilities(const db::Run& run) const {
  Abilities a;
  const PlaceKind kind = kind_of(run);
  const bool running = run.status == db::RunStatus::kRunning;
  const bool live_here = kind == PlaceKind::kHere && !run.run_dir.empty() && live_worker_pid(run.run_dir) > 0;
  // attach
  if (kind == PlaceKind::kSlurm) {
    if (run.status != db::RunStatus::kQueued && !running && run.status != db::RunStatus::kPreempted)
      a.attach = "run " + run.name + " has ended (" + db::to_string(run.status) + "): nothing to attach to";
  } else if (!running || (kind == PlaceKind::kHere && !live_here)) {
    a.attach = "run " + run.name + " is " + status_text(run) + ": no live worker to attach to";
  }
  // resume
  if (live_here) {
    a.resume = "run " + run.name + " is running (its worker, pid " +
               std::to_string(live_worker_pid(run.run_dir)) +
               ", is alive): it is running already; watch it with flotilla runs attach " + run.name +
               ", or stop it from the command or app that watches it";
  } else if (running || run.status == db::RunStatus::kQueued) {
    a.resume = "run " + run.name + " is running already; to watch it: flotilla runs attach " + run.name;
  } else if (!db::transition_allowed(run.status, db::RunStatus::kRunning)) {
    a.resume = "run " + run.name + " is " + status_text(run) + " and cannot be resumed";
  } else if (kind == PlaceKind::kHere && run.run_dir.empty()) {
    a.resume = "run " + run.name + " has no run directory to resume from";
  }
  // stop / checkpoint / kill: a watcher does all three; these say whether there is anything to ask
  // (a run on this machine: a live worker, pid and start time checked, which any process can signal)
  if (!running && run.status != db::RunStatus::kQueued)
    a.stop = "run " + run.name + " is not running";
  else if (kind == PlaceKind::kHere && !live_here)
    a.stop =
        "run " + run.name + " has no live worker on this machine (its worker.pid names no running process)";
  if (kind == PlaceKind::kSlurm)
    a.checkpoint = checkpoint_refusal(placement_of(run));
  else if (!running)
    a.checkpoint = "run " + run.name + " is not running; nothing to checkpoint";
  else if (kind == PlaceKind::kHere && !live_here)
    a.checkpoint = a.stop;
  a.kill = a.stop;
  if (kind == PlaceKind::kHere) a.remove = live_worker_delete_refusal(run);
  return a;
}

Placement RunService::placement_of(const db::Run& run) {
  switch (kind_of(run)) {
    case PlaceKind::kHere:
      return Placement::here();
    case PlaceKind::kNodes: {
      std::vector<std::string> names;
      std::stringstream list(run.target);
      for (std::string name; std::getline(list, name, ',');)
        if (!name.empty()) names.push_back(name);
      return Placement::on_nodes(std::move(names));
    }
    case PlaceKind::kSlurm:
      return Placement::on_cluster(run.target.substr(6));
  }
  return Placement::here();
}

std::string RunService::checkpoint_refusal(const Placement& where) {
  if (where.kind == PlaceKind::kSlurm)
    return "A Slurm job checkpoints on its schedule and before its time limit (the batch script's signal), "
           "not on request; Stop checkpoints and ends it.";
  return "";
}

std::string RunService::where_text(const db::Run& run) {
  switch (kind_of(run)) {
    case PlaceKind::kHere:
      return "this machine";
    case PlaceKind::kNodes: {
      const std::vector<std::string> names = placement_of(run).nodes;
      std::string out;
      for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
      return (names.size() == 1 ? "node " : "nodes ") + out;
    }
    case PlaceKind::kSlurm:
      return "slurm cluster " + run.target.substr(6);
  }
  return "";
}

std::string RunService::folder_text(const db::Run& run) const {
  if (kind_of(run) != PlaceKind::kSlurm) return run.run_dir;
  try {
    db::Database db(options_.ssh.database_path);
    if (const auto job = db::find_slurm_job(db, run.id)) return run.target.substr(6) + ":" + job->run_dir;
  } catch (const db::DbError&) {
  }
  return "";
}

std::vector<SettledRun> RunService::settle_stale() {
  db::Writer* w = writer();
  return w ? settle_stale_local_runs(*w, options_.origin) : std::vector<SettledRun>{};
}

std::vector<int64_t> RunService::attachable_runs() const {
  db::Database db(options_.ssh.database_path);
  std::vector<int64_t> out;
  for (const db::RunListItem& item : db::list_runs(db)) {
    const db::Run& r = item.run;
    const PlaceKind k = kind_of(r);
    if (k == PlaceKind::kNodes && r.status == db::RunStatus::kRunning) out.push_back(r.id);
    if (k == PlaceKind::kSlurm &&
        (r.status == db::RunStatus::kQueued || r.status == db::RunStatus::kRunning ||
         r.status == db::RunStatus::kPreempted))
      out.push_back(r.id);
    if (k == PlaceKind::kHere && r.status == db::RunStatus::kRunning && !r.run_dir.empty() &&
        live_worker_pid(r.run_dir) > 0)
      out.push_back(r.id);
  }
  return out;
}

}  // namespace flotilla::runs
