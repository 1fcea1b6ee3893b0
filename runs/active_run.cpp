// ActiveRun (see service.h): a run this process started, attached to or resumed, as the runs
// service hands it over: what a front end shows of it (its headline, folder, command line, job) and
// its one watch, which goes to the watch loop of its place (this machine, SSH nodes, a Slurm
// cluster). Its state, ActiveRun::Impl, is filled by the service (service_internal.h).
#include <fstream>
#include <string>
#include <vector>

#include "db/database.h"
#include "db/errors.h"
#include "db/run_store.h"
#include "engine/config/config_io.h"
#include "engine/core/error.h"
#include "runs/local_run.h"
#include "runs/node_run.h"
#include "runs/service.h"
#include "runs/service_internal.h"
#include "runs/slurm_run.h"
#include "runs/worker_command.h"

namespace flotilla::runs {

ActiveRun::ActiveRun(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ActiveRun::~ActiveRun() = default;
int64_t ActiveRun::id() const { return impl_->id; }
const std::string& ActiveRun::name() const { return impl_->name; }
std::string ActiveRun::where_text() const { return impl_->where; }
std::string ActiveRun::folder_text() const { return impl_->folder; }
int64_t ActiveRun::total_steps() const { return impl_->total_steps; }
bool ActiveRun::running_when_found() const { return impl_->running_found; }

std::string ActiveRun::checkpoint_refusal() const {
  Placement where;
  where.kind = impl_->kind;
  return RunService::checkpoint_refusal(where);
}

std::string ActiveRun::command_line() const {
  if (impl_->kind != PlaceKind::kHere) return "";
  if (!impl_->command.empty()) return impl_->command;
  // Re-attached: the live worker's own command line.
  if (impl_->local.pid <= 0) return "";
  std::ifstream f("/proc/" + std::to_string(impl_->local.pid) + "/cmdline", std::ios::binary);
  std::vector<std::string> argv;
  std::string arg;
  while (std::getline(f, arg, '\0'))
    if (!arg.empty()) argv.push_back(arg);
  return runs::command_line(argv);
}

int64_t ActiveRun::local_pid() const { return impl_->kind == PlaceKind::kHere ? impl_->local.pid : 0; }

std::string ActiveRun::job_id() const {
  return impl_->kind == PlaceKind::kSlurm ? impl_->slurm_watch.job_id : "";
}

std::string ActiveRun::headline() const {
  const Impl& m = *impl_;
  const std::string run = "run " + m.name + " (id " + std::to_string(m.id) + ")";
  switch (m.kind) {
    case PlaceKind::kHere:
      if (m.how == Impl::How::kAttached)
        return "attached to " + run + ", worker pid " + std::to_string(m.local.pid) + ": " + m.folder;
      return run + ": " + m.folder;
    case PlaceKind::kNodes: {
      const std::string dir = "remote dir ~/.flotilla/runs/" + m.node_watch.rid;
      const std::string count = std::to_string(m.nodes.size()) + " node(s)";
      if (m.how == Impl::How::kAttached)
        return "attached to " + run + " on " + count + ", " + dir + ", " +
               (m.running_found ? "running" : "already exited");
      if (m.how == Impl::How::kResumed) return "resumed " + run + " on " + m.where + ", " + dir;
      int ranks = 0;
      try {
        const db::Database reader(m.writer->path());
        ranks = ranks_of(parse_config_toml(db::get_run(reader, m.id).config_toml, m.name));
      } catch (const std::exception&) {
      }
      const size_t per_node = m.nodes.empty() ? 0 : static_cast<size_t>(ranks) / m.nodes.size();
      return run + ": " + count + " x " + std::to_string(per_node) + " rank(s), " + dir;
    }
    case PlaceKind::kSlurm: {
      const std::string job = "slurm job " + m.slurm_watch.job_id + " on cluster " + m.slurm_watch.cluster;
      if (m.how == Impl::How::kAttached) return "attached to run " + m.name + ": " + job;
      if (m.how == Impl::How::kResumed) return "run " + m.name + ": resumed as " + job;
      return "run " + m.name + ": " + job;
    }
  }
  return run;
}

WatchResult ActiveRun::watch(const WatchHooks& hooks) {
  Impl& m = *impl_;
  WatchResult r;
  const uint64_t rows_before = m.writer ? m.writer->stats().committed_rows : 0;
  const auto from_store = [&](int code) {
    r.exit_code = code;
    if (code == kLeft || code == static_cast<int>(ExitCode::kComm)) {
      r.recorded = false;
      return;
    }
    try {
      db::Database reader(m.writer->path());
      const db::Run run = db::get_run(reader, m.id);
      r.end.status = run.status;
      r.end.note = run.status_note;
      r.end.exit_code = run.exit_code;
    } catch (const db::DbError& e) {
      r.store_error = e.what();
    }
  };
  switch (m.kind) {
    case PlaceKind::kHere: {
      const LocalOutcome out = watch_local_run(m.writer, m.local, hooks);
      r.exit_code = out.exit_code;
      r.signal = out.signal;
      r.end = out.end;
      r.recorded = out.recorded;
      r.stored_all = out.stored_all;
      r.store_error = out.store_error;
      r.last_step = out.last_step;
      r.root_cause = out.root_cause;
      r.vanished = out.vanished;
      break;
    }
    case PlaceKind::kNodes:
      from_store(supervise_node_run(*m.writer, m.nodes, m.node_watch, hooks, m.recovery));
      break;
    case PlaceKind::kSlurm:
      from_store(watch_slurm_run(*m.writer, *m.login, m.slurm_watch, hooks));
      break;
  }
  if (m.writer) r.committed_rows = m.writer->stats().committed_rows - rows_before;
  return r;
}

}  // namespace flotilla::runs
