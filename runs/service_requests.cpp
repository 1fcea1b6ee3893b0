// The runs service (see service.h), continued: asking a run that this process does not watch for
// a checkpoint now, a stop or a kill, and a run's checkpoints (listed where they are, fetched to
// this machine).
#include <signal.h>
#include <sys/types.h>

#include <algorithm>
#include <filesystem>

#include "db/database.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "engine/core/stop_request.h"
#include "remote/remote_run.h"
#include "remote/session.h"
#include "runs/process.h"
#include "runs/service.h"
#include "runs/service_internal.h"

namespace flotilla::runs {

namespace fs = std::filesystem;
using namespace service_detail;

void RunService::request_checkpoint(int64_t run_id) {
  db::Database db(options_.ssh.database_path);
  const db::Run run = db::get_run(db, run_id);
  switch (kind_of(run)) {
    case PlaceKind::kHere: {
      const pid_t pid = run.run_dir.empty() ? 0 : live_worker_pid(run.run_dir);
      if (run.status != db::RunStatus::kRunning || pid <= 0)
        throw Refusal("run " + run.name + " is not running on this machine; nothing to checkpoint");
      ::kill(pid, SIGUSR1);
      return;
    }
    case PlaceKind::kNodes: {
      RemoteFolder f = open_remote_folder(options_, db, run);
      if (!remote::request_remote_checkpoint(*f.session, f.rid))
        throw Refusal("run " + run.name + " is not running on node " + f.host_name +
                      "; nothing to checkpoint");
      return;
    }
    case PlaceKind::kSlurm:
      throw Refusal("run " + run.name +
                    ": a Slurm job checkpoints on its schedule and before its time limit (the batch script's "
                    "signal), not on request; stopping it checkpoints and ends it");
  }
}

void RunService::request_end(int64_t run_id, bool kill, const std::string& by) {
  db::Writer* writer = this->writer();
  if (!writer)
    throw Refusal("no run database: a stop or kill is recorded there before the worker is signalled");
  db::Run run;
  writer->run([&](db::Database& db) { run = db::get_run(db, run_id); });
  const Abilities can = abilities(run);
  if (const std::string& why = kill ? can.kill : can.stop; !why.empty()) throw Refusal(why);
  const pid_t pid = kind_of(run) == PlaceKind::kHere ? live_worker_pid(run.run_dir) : 0;
  if (pid <= 0)
    throw Refusal("run " + run.name +
                  " is not running on this machine; stop it from the command or app that " +
                  "watches it (flotilla runs attach " + run.name + ")");
  const std::string note = kill ? "killed on request" : "on request";
  writer->run([&](db::Database& db) { db::add_end_request(db, run_id, {kill ? "kill" : "stop", note, 0}); });
  if (kill) {
    kill_worker_tree(pid);
  } else {
    write_stop_request(run.run_dir, {"stop", note, by});
    ::kill(pid, SIGTERM);
  }
}

std::vector<CheckpointEntry> RunService::checkpoints(int64_t run_id, int* purged) {
  db::Database db(options_.ssh.database_path);
  const db::Run run = db::get_run(db, run_id);
  std::vector<CheckpointEntry> out;
  if (purged) *purged = 0;
  if (kind_of(run) == PlaceKind::kHere) {
    // Only what is still on disk: a checkpoint the worker has purged since (checkpoint.keep_last)
    // is not offered, though the store remembers it was written.
    for (const auto& c : db::list_checkpoints(db, run.id)) {
      std::error_code ec;
      if (!fs::exists(fs::path(c.dir) / "MANIFEST", ec)) {
        if (purged) ++*purged;
        continue;
      }
      out.push_back({c.step, c.dir, c.dir, c.bytes, c.reason});
    }
    return out;
  }
  RemoteFolder f = open_remote_folder(options_, db, run);
  for (const auto& c : remote::list_remote_checkpoints(*f.session, f.rid)) {
    CheckpointEntry e;
    e.step = c.step;
    e.where = f.host_name + ":" + f.dir + "/checkpoints/" + c.name;
    out.push_back(e);
  }
  return out;
}

std::string RunService::fetch_checkpoint(int64_t run_id, std::optional<int64_t> step,
                                         const std::string& out_dir) {
  db::Database db(options_.ssh.database_path);
  const db::Run run = db::get_run(db, run_id);
  const auto pick = [&](const std::vector<int64_t>& steps, const std::string& where) -> int64_t {
    if (steps.empty()) throw Refusal("run " + run.name + " has no committed checkpoint" + where);
    if (!step) return steps.back();
    if (std::find(steps.begin(), steps.end(), *step) == steps.end()) {
      std::string list;
      for (const auto s : steps) list += (list.empty() ? "" : ", ") + std::to_string(s);
      throw Refusal("run " + run.name + " has no checkpoint at step " + std::to_string(*step) + " (it has " +
                    list + ")");
    }
    return *step;
  };
  if (kind_of(run) == PlaceKind::kHere) {
    const auto all = checkpoints(run_id);
    std::vector<int64_t> steps;
    for (const auto& c : all) steps.push_back(c.step);
    const int64_t want = pick(steps, " on disk");
    for (const auto& c : all)
      if (c.step == want) return c.local_dir;
  }
  RemoteFolder f = open_remote_folder(options_, db, run);
  std::vector<int64_t> steps;
  for (const auto& c : remote::list_remote_checkpoints(*f.session, f.rid)) steps.push_back(c.step);
  const int64_t want = pick(steps, " on " + f.host_name);
  const std::string dir = out_dir.empty() ? (fs::path(checkpoints_root(options_)) / run.name).string()
                                          : fs::absolute(out_dir).string();
  fs::create_directories(dir);
  return remote::fetch_remote_checkpoint(*f.session, f.rid, want, dir);
}

}  // namespace flotilla::runs
