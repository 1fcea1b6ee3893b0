// The runs service (see service.h): one face over the places a run executes.
#include "runs/service.h"

#include <signal.h>
#include <sys/types.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "db/clusters.h"
#include "db/errors.h"
#include "db/ingest.h"
#include "db/nodes.h"
#include "db/queries.h"
#include "db/run_records.h"
#include "engine/config/config_io.h"
#include "engine/core/error.h"
#include "engine/core/stop_request.h"
#include "remote/remote_run.h"
#include "remote/session.h"
#include "remote/slurm_cluster.h"
#include "runs/fault_point.h"
#include "runs/local_run.h"
#include "runs/node_run.h"
#include "runs/process.h"
#include "runs/run_setup.h"
#include "runs/slurm_run.h"
#include "runs/stale_runs.h"
#include "runs/worker_command.h"

namespace flotilla::runs {
namespace {

namespace fs = std::filesystem;

PlaceKind kind_of(const db::Run& run) {
  if (is_slurm_run(run)) return PlaceKind::kSlurm;
  if (is_node_run_dir(run.run_dir)) return PlaceKind::kNodes;
  return PlaceKind::kHere;
}

void apply_layout(RunConfig& config, const Layout& layout) {
  if (layout.dp) config.parallel.dp = *layout.dp;
  if (layout.tp) config.parallel.tp = *layout.tp;
  if (layout.pp) config.parallel.pp = *layout.pp;
  if (layout.zero) config.parallel.zero = *layout.zero;
}

int64_t steps_of(const db::Run& run) {
  try {
    return parse_config_toml(run.config_toml, run.name).train.steps;
  } catch (const Error&) {
    return 0;
  }
}

// The one naming rule for a run that is not on this machine (create_local_run applies the same to
// local runs): a name asked for must be free; else the config's name, NAME-2 when taken.
std::string new_run_name(const db::Database& db, const std::string& asked, const std::string& from_config) {
  if (asked.empty()) {
    check_new_run_name(from_config);
    return db::unique_run_name(db, from_config);
  }
  if (db::find_run(db, asked))
    throw db::DbError(db::DbErrorKind::kConstraint, "a run named '" + asked +
                                                        "' already exists: choose another name, or continue it "
                                                        "with flotilla runs resume " +
                                                        asked);
  return asked;
}

std::string worker_of(const ServiceOptions& o) { return find_worker(o.worker_path); }

std::string checkpoints_root(const ServiceOptions& o) {
  if (!o.checkpoints_root.empty()) return o.checkpoints_root;
  return (fs::path(o.ssh.database_path).parent_path() / "checkpoints").string();
}

// Connects `session`; a host key problem becomes a Refusal in the access's words.
void connect_or_refuse(const SshAccess& access, remote::Session& session, const std::string& node,
                       bool cluster = false) {
  try {
    session.connect();
  } catch (const remote::HostKeyError& e) {
    throw Refusal(host_key_text(access, host_key_refusal(node, e, cluster)));
  }
}

std::vector<Node> connect_named(const SshAccess& access, db::Database& db,
                                const std::vector<std::string>& names) {
  std::vector<Node> nodes;
  for (const auto& n : names) nodes.push_back(Node{db::get_ssh_node(db, n), nullptr, ""});
  connect_nodes(nodes, access);
  return nodes;
}

// A placement's recovery choice as the store records it (whoever re-attaches recovers the same way).
RecoveryPolicy policy_of(const RecoveryChoice& choice) {
  RecoveryPolicy policy;
  policy.enabled = choice.enabled;
  policy.spares = choice.spares;
  policy.max_recoveries = choice.max_recoveries;
  policy.settle_seconds = choice.settle_seconds;
  policy.mirror = choice.mirror;
  return policy;
}

Recovery recovery_for(const ServiceOptions& o, db::Database& db, const RecoveryChoice& choice,
                      const std::string& run_name, bool no_bind) {
  Recovery r;
  r.enabled = choice.enabled;
  r.max_recoveries = choice.max_recoveries;
  r.settle_seconds = choice.settle_seconds;
  for (const auto& name : choice.spares) r.spares.push_back(db::get_ssh_node(db, name));
  r.options = [access = o.ssh](const db::SshNode& rec) { return ssh_session_options(access, rec); };
  r.worker_path = worker_of(o);
  r.version = o.version;
  r.no_bind = no_bind;
  if (choice.mirror) r.mirror_dir = (fs::path(checkpoints_root(o)) / run_name).string();
  return r;
}

// The master node and the remote run id of a run on nodes or a cluster's login node.
struct RemoteFolder {
  std::unique_ptr<remote::Session> session;
  std::string host_name;  // the node's or cluster's name
  std::string rid;
  std::string dir;  // the folder there
};

RemoteFolder open_remote_folder(const ServiceOptions& o, db::Database& db, const db::Run& run) {
  RemoteFolder f;
  if (kind_of(run) == PlaceKind::kSlurm) {
    const auto job = db::find_slurm_job(db, run.id);
    if (!job) throw Refusal("run " + run.name + " was never submitted (no Slurm job recorded)");
    std::optional<db::SlurmCluster> cluster;
    for (const auto& c : db::list_clusters(db))
      if (c.id == job->cluster_id) cluster = c;
    if (!cluster) throw Refusal("the cluster of run " + run.name + " is no longer stored");
    f.session = std::make_unique<remote::Session>(ssh_session_options(o.ssh, login_node(*cluster)));
    connect_or_refuse(o.ssh, *f.session, cluster->name, true);
    f.host_name = cluster->name;
    f.dir = job->run_dir;
    f.rid = job->run_dir.substr(job->run_dir.find_last_of('/') + 1);
    return f;
  }
  const auto colon = run.run_dir.find(':');
  const std::string master = run.run_dir.substr(0, colon);
  f.session = std::make_unique<remote::Session>(ssh_session_options(o.ssh, db::get_ssh_node(db, master)));
  connect_or_refuse(o.ssh, *f.session, master);
  f.host_name = master;
  f.dir = run.run_dir.substr(colon + 1);
  f.rid = run.run_dir.substr(run.run_dir.rfind('/') + 1);
  return f;
}

}  // namespace

bool connect_nodes(std::vector<Node>& nodes, const SshAccess& access) {
  std::string refused;
  if (!connect_nodes(
          nodes, [&](const db::SshNode& rec) { return ssh_session_options(access, rec); },
          [&](const std::string& node, const remote::HostKeyError& e) {
            refused = host_key_text(access, host_key_refusal(node, e));
          }))
    throw Refusal(refused);
  return true;
}

// ---------------------------------------------------------------------------------------------
// ActiveRun

struct ActiveRun::Impl {
  PlaceKind kind = PlaceKind::kHere;
  std::unique_ptr<db::Writer> own_writer;
  db::Writer* writer = nullptr;  // nullptr: an unstored local run
  int64_t id = 0;
  std::string name, where, folder;
  int64_t total_steps = 0;
  bool running_found = true;
  enum class How { kStarted, kAttached, kResumed } how = How::kStarted;  // for headline()
  // this machine
  LocalWatch local;
  std::string command;  // the worker's command line when this process started it
  // nodes
  std::vector<Node> nodes;
  Watch node_watch;
  Recovery recovery;
  // slurm
  std::unique_ptr<remote::Session> login;
  SlurmWatch slurm_watch;
};

ActiveRun::ActiveRun(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

namespace {
// A local start's spawn, its command line kept for ActiveRun::command_line().
SpawnOptions remembered(ActiveRun::Impl& m, SpawnOptions spawn) {
  m.command = command_line(spawn.argv);
  return spawn;
}
}  // namespace
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

// ---------------------------------------------------------------------------------------------
// RunService

RunService::RunService(ServiceOptions options) : options_(std::move(options)) {}
RunService::~RunService() = default;

db::Writer* RunService::writer() {
  if (options_.writer) return options_.writer;
  if (options_.ssh.database_path.empty()) return nullptr;
  if (!own_writer_) own_writer_ = std::make_unique<db::Writer>(options_.ssh.database_path);
  return own_writer_.get();
}

namespace {

// An Impl writing through the service's writer when it has one, else through its own.
std::unique_ptr<ActiveRun::Impl> new_impl(const ServiceOptions& o, PlaceKind kind) {
  auto impl = std::make_unique<ActiveRun::Impl>();
  impl->kind = kind;
  if (o.writer) {
    impl->writer = o.writer;
  } else if (!o.ssh.database_path.empty()) {
    impl->own_writer = std::make_unique<db::Writer>(o.ssh.database_path);
    impl->writer = impl->own_writer.get();
  }
  return impl;
}

SpawnOptions spawn_for(const ServiceOptions& o, std::vector<std::string> argv, const std::string& run_dir) {
  SpawnOptions spawn;
  spawn.argv = std::move(argv);
  spawn.run_dir = run_dir;
  spawn.working_dir = o.working_dir.empty() ? fs::current_path().string() : o.working_dir;
  spawn.stop_with_parent = o.stop_with_parent;
  spawn.env = o.worker_env;
  return spawn;
}

}  // namespace

std::unique_ptr<ActiveRun> RunService::start(const RunRequest& req, const Note& progress) {
  RunConfig config = req.config;
  apply_layout(config, req.layout);
  if (req.max_restarts) config.run.max_restarts = *req.max_restarts;
  if (!req.resume_from.empty() && req.where.kind == PlaceKind::kHere)
    config.checkpoint.resume = req.resume_from;
  if (!req.resume_from.empty() && req.where.kind == PlaceKind::kSlurm)
    throw Refusal(
        "starting a run on a Slurm cluster from a checkpoint of this machine is not supported yet: "
        "fork it here or on SSH nodes");
  if (!req.name.empty()) check_new_run_name(req.name);
  auto impl = new_impl(options_, req.where.kind);
  impl->where = req.where.text();
  switch (req.where.kind) {
    case PlaceKind::kHere: {
      NewRun nr;
      if (impl->writer) {
        NewRunRequest n;
        n.config = config;
        n.name = req.name;
        n.explicit_name = req.explicit_name;
        n.runs_root = options_.runs_root;
        n.budget_usd = req.budget_usd;
        n.max_restarts = req.max_restarts;
        n.fork_of = req.fork_of;
        n.notes = req.notes;
        n.demo = req.demo;
        nr = create_local_run(*impl->writer, n);
        scheduler_fault_point("after-create");  // tests only (runs/fault_point.h)
      } else {
        if (!req.demo) validate_run_config(config, ranks_of(config));
        const auto [name, dir] =
            place_unstored_run(options_.runs_root, req.name.empty() ? config.run.name : req.name);
        nr.name = name;
        nr.run_dir = dir;
        fs::create_directories(dir);
        nr.config = config;
        nr.config.run.name = name;
        nr.config.run.out_dir = dir;
        if (!req.demo) {
          nr.config_path = (fs::path(dir) / "run.toml").string();
          std::ofstream f(nr.config_path);
          f << config_to_toml(nr.config);
          if (!f) throw Error(ExitCode::kIo, "cannot write " + nr.config_path);
        }
      }
      std::vector<std::string> argv;
      if (req.demo) {
        argv = demo_argv(worker_of(options_), nr.run_dir, static_cast<int>(req.demo_steps), req.demo_sets);
      } else {
        TrainCommand c;
        c.worker = worker_of(options_);
        c.config_path = nr.config_path;
        c.ranks = ranks_of(nr.config);
        c.max_restarts = nr.config.run.max_restarts;
        c.no_bind = options_.no_bind;
        argv = train_argv(c);
      }
      impl->local = start_local_run(impl->writer, nr.run_id, nr.name, remembered(*impl, spawn_for(options_, argv, nr.run_dir)),
                                    options_.origin, req.demo ? req.demo_steps : nr.config.train.steps);
      impl->id = nr.run_id;
      impl->name = nr.name;
      impl->folder = nr.run_dir;
      impl->total_steps = impl->local.total_steps;
      break;
    }
    case PlaceKind::kNodes: {
      if (!impl->writer) throw Error(ExitCode::kUsage, "a run on SSH nodes needs the run database");
      db::Database db(options_.ssh.database_path);
      const std::string name = new_run_name(db, req.name, config.run.name);
      config.run.name = name;
      const Placement& p = req.where;
      int per_node = ranks_per_node(config, static_cast<int>(p.nodes.size()), p.nproc_per_node);
      std::vector<Node> nodes = connect_named(options_.ssh, db, p.nodes);
      StartRequest s;
      s.config = config;
      s.name = name;
      s.budget_usd = req.budget_usd;
      s.max_restarts = req.max_restarts;
      s.nproc_per_node = per_node;
      s.master_port = p.master_port;
      s.no_bind = p.no_bind;
      s.worker_path = worker_of(options_);
      s.version = options_.version;
      s.origin = options_.origin;
      s.fork_of = req.fork_of;
      s.from_checkpoint = req.resume_from;
      s.cancelled = req.cancelled;
      impl->node_watch = start_on_nodes(db, nodes, s, progress);
      record_recovery_policy(db, impl->node_watch.run_id, policy_of(p.recovery));
      impl->recovery = recovery_for(options_, db, p.recovery, name, p.no_bind);
      impl->nodes = std::move(nodes);
      impl->id = impl->node_watch.run_id;
      impl->name = name;
      impl->total_steps = impl->node_watch.total_steps;
      impl->folder = impl->nodes[0].rec.name + ":~/.flotilla/runs/" + impl->node_watch.rid;
      break;
    }
    case PlaceKind::kSlurm: {
      if (!impl->writer) throw Error(ExitCode::kUsage, "a run on a Slurm cluster needs the run database");
      db::Database db(options_.ssh.database_path);
      const std::string name = new_run_name(db, req.name, config.run.name);
      config.run.name = name;
      const Placement& p = req.where;
      const db::SlurmCluster cluster = db::get_cluster(db, p.cluster);
      impl->login = std::make_unique<remote::Session>(ssh_session_options(options_.ssh, login_node(cluster)));
      connect_or_refuse(options_.ssh, *impl->login, cluster.name, true);
      SlurmStartRequest s;
      s.config = config;
      s.name = name;
      s.budget_usd = req.budget_usd;
      s.max_restarts = req.max_restarts;
      s.nodes = p.slurm_nodes;
      s.tasks_per_node = p.tasks_per_node;
      s.gpus_per_node = p.gpus_per_node;
      s.time_limit = p.time_limit;
      s.partition = p.partition;
      s.account = p.account;
      s.signal_lead_s = p.signal_lead_s;
      s.auto_resume = p.auto_resume;
      s.worker_path = worker_of(options_);
      s.version = options_.version;
      s.origin = options_.origin;
      s.cancelled = req.cancelled;
      impl->slurm_watch = submit_slurm_run(db, *impl->login, cluster, s, progress);
      impl->id = impl->slurm_watch.run_id;
      impl->name = name;
      impl->total_steps = impl->slurm_watch.total_steps;
      impl->where = "slurm cluster " + cluster.name + ", job " + impl->slurm_watch.job_id;
      impl->folder = cluster.name + ":" + impl->slurm_watch.run_dir;
      break;
    }
  }
  return std::make_unique<ActiveRun>(std::move(impl));
}

std::unique_ptr<ActiveRun> RunService::attach(int64_t run_id, const Note& progress,
                                              const std::optional<RecoveryChoice>& recovery) {
  (void)progress;
  db::Database db(options_.ssh.database_path);
  const db::Run run = db::get_run(db, run_id);
  const PlaceKind kind = kind_of(run);
  auto impl = new_impl(options_, kind);
  impl->how = ActiveRun::Impl::How::kAttached;
  impl->id = run.id;
  impl->name = run.name;
  impl->where = where_text(run);
  impl->folder = folder_text(run);
  switch (kind) {
    case PlaceKind::kHere: {
      impl->local =
          attach_local_run(run.id, run.name, run.run_dir, options_.origin + " (re-attached)", steps_of(run));
      if (run.status != db::RunStatus::kRunning || impl->local.pid <= 0)
        throw Refusal("run " + run.name + " is " + status_text(run) + ": no live worker to attach to" +
                      (run.status == db::RunStatus::kRunning ? "" : " (flotilla runs resume continues it)"));
      impl->total_steps = impl->local.total_steps;
      break;
    }
    case PlaceKind::kNodes: {
      std::vector<Node> nodes;
      std::string rid;
      if (const std::string why = attach_target(db, run, nodes, rid); !why.empty()) throw Refusal(why);
      connect_nodes(nodes, options_.ssh);
      std::string refusal;
      bool running = false;
      impl->node_watch = attach_watch(run, nodes, rid, options_.origin + " (re-attached)", refusal, running);
      if (!refusal.empty()) throw Refusal(refusal);
      impl->running_found = running;
      // What the run's starter chose about preemptions, less the recoveries already done.
      const RecoveryPolicy p = stored_recovery_policy(db, run.id);
      RecoveryChoice choice;
      choice.enabled = p.enabled;
      for (const auto& spare : p.spares)  // a spare that has replaced a node since is no longer one
        if (std::none_of(nodes.begin(), nodes.end(), [&](const Node& n) { return n.rec.name == spare; }))
          choice.spares.push_back(spare);
      choice.max_recoveries = p.max_recoveries;
      choice.settle_seconds = p.settle_seconds;
      choice.mirror = p.mirror;
      if (recovery) {  // the caller's choice instead (flotilla runs attach --auto-recover ...)
        for (const auto& spare : recovery->spares)
          for (const auto& n : nodes)
            if (n.rec.name == spare)
              throw Error(ExitCode::kUsage, "--spare names node '" + spare + "', which the run already uses");
        choice = *recovery;
      }
      impl->recovery = recovery_for(options_, db, choice, run.name, options_.no_bind);
      impl->nodes = std::move(nodes);
      impl->total_steps = impl->node_watch.total_steps;
      break;
    }
    case PlaceKind::kSlurm: {
      db::SlurmCluster cluster;
      if (const std::string why = slurm_attach_target(db, run, impl->slurm_watch, cluster); !why.empty())
        throw Refusal(why);
      impl->login = std::make_unique<remote::Session>(ssh_session_options(options_.ssh, login_node(cluster)));
      connect_or_refuse(options_.ssh, *impl->login, cluster.name, true);
      impl->total_steps = impl->slurm_watch.total_steps;
      impl->where = "slurm cluster " + cluster.name + ", job " + impl->slurm_watch.job_id;
      break;
    }
  }
  return std::make_unique<ActiveRun>(std::move(impl));
}

std::unique_ptr<ActiveRun> RunService::resume(int64_t run_id, const ResumeRequest& req,
                                              const Note& progress) {
  db::Database db(options_.ssh.database_path);
  const db::Run run = db::get_run(db, run_id);
  const PlaceKind kind = kind_of(run);
  if (const std::string why = abilities(run).resume; !why.empty()) throw Refusal(why);
  if (req.where && moves(run, *req.where)) return move(run, req, progress);
  auto impl = new_impl(options_, kind);
  impl->how = ActiveRun::Impl::How::kResumed;
  impl->id = run.id;
  impl->name = run.name;
  impl->where = where_text(run);
  impl->folder = folder_text(run);
  switch (kind) {
    case PlaceKind::kHere: {
      if (const auto live = live_group(run.run_dir))
        throw Refusal("run " + run.name + " " + live_group_text(run.run_dir, *live));
      const std::string config_file = stored_config_file(run);
      RunConfig config = load_config(config_file, req.layout.sets());
      validate_run_config(config, ranks_of(config));
      reprice_for_start(*impl->writer, run.id, config, req.budget_usd);
      if (!req.layout.empty())
        impl->writer->run([&](db::Database& wdb) {
          db::add_event(wdb, run.id, db::now_seconds(), "layout", "info",
                        "resumed on another layout: " + req.layout.text());
        });
      TrainCommand c;
      c.worker = worker_of(options_);
      c.config_path = config_file;
      c.ranks = ranks_of(config);
      c.max_restarts = config.run.max_restarts;
      c.resume = true;
      c.no_bind = options_.no_bind;
      c.sets = {"run.out_dir=" + run.run_dir};
      for (const auto& s : req.layout.sets()) c.sets.push_back(s);
      try {
        impl->local =
            start_local_run(impl->writer, run.id, run.name, remembered(*impl, spawn_for(options_, train_argv(c), run.run_dir)),
                            options_.origin, config.train.steps);
      } catch (const RunFolderBusy& e) {  // a group started there since the check above
        throw Refusal(e.what());
      }
      impl->total_steps = impl->local.total_steps;
      break;
    }
    case PlaceKind::kNodes: {
      std::vector<Node> nodes;
      std::string rid;
      if (const std::string why = attach_target(db, run, nodes, rid, true); !why.empty()) throw Refusal(why);
      const RecoveryChoice choice = req.recovery.value_or(RecoveryChoice{});
      for (const auto& spare : choice.spares)
        for (const auto& n : nodes)
          if (n.rec.name == spare)
            throw Error(ExitCode::kUsage, "--spare names node '" + spare + "', which the run already uses");
      // Host-key problems refuse the resume; a node that does not answer is left to restart_on_nodes.
      for (auto& n : nodes) {
        n.session = std::make_unique<remote::Session>(ssh_session_options(options_.ssh, n.rec));
        try {
          connect_or_refuse(options_.ssh, *n.session, n.rec.name);
        } catch (const Refusal&) {
          throw;
        } catch (const Error& e) {
          if (progress) progress("node " + n.rec.name + " does not answer: " + e.what());
        }
      }
      if (!req.layout.empty()) {
        // Another layout: the run's config (stored, and run.toml on every node that answers) says the
        // new dp/tp/pp/ZeRO; the ranks are spread over the nodes for it and the worker re-cuts the
        // checkpoint on the master to it.
        RunConfig config = parse_config_toml(run.config_toml, "run " + run.name);
        const std::string was =
            "dp=" + std::to_string(config.parallel.dp) + " tp=" + std::to_string(config.parallel.tp) +
            " pp=" + std::to_string(config.parallel.pp) + " zero=" + std::to_string(config.parallel.zero);
        apply_layout(config, req.layout);
        validate_run_config(config, ranks_of(config));
        const std::string toml = config_to_toml(config);
        for (auto& n : nodes)
          if (n.session && n.session->connected()) remote::upload_run_config(*n.session, rid, toml);
        db::set_run_config(db, run.id, toml, config_to_json(config, -1));
        db::add_event(db, run.id, db::now_seconds(), "layout", "info",
                      "resumed on another layout: " + req.layout.text() + " (was " + was + ")");
      }
      Watch w;
      w.run_id = run.id;
      w.name = run.name;
      w.rid = rid;
      impl->recovery = recovery_for(options_, db, choice, run.name, options_.no_bind);
      std::vector<db::SshNode> spares = impl->recovery.spares;
      const std::string why = restart_on_nodes(*impl->writer, nodes, w, impl->recovery, spares,
                                               "resumed by " + options_.origin, false, progress);
      if (!why.empty()) throw Refusal(why);
      impl->node_watch = w;
      impl->nodes = std::move(nodes);
      impl->total_steps = w.total_steps;
      impl->where = where_text(db::get_run(db, run.id));
      break;
    }
    case PlaceKind::kSlurm: {
      db::SlurmCluster cluster;
      if (const std::string why = slurm_resume_target(db, run, cluster); !why.empty()) throw Refusal(why);
      // Another layout with the job's rank count: its batch script (nodes x tasks) is submitted again
      // as it was, with the run's config there saying the new dp/tp/pp/ZeRO.
      std::optional<RunConfig> relaid;
      const db::SlurmJob job = *db::find_slurm_job(db, run.id);
      if (!req.layout.empty()) {
        RunConfig config = parse_config_toml(run.config_toml, "run " + run.name);
        apply_layout(config, req.layout);
        const int64_t ranks = std::max<int64_t>(1, job.nodes) * std::max<int64_t>(1, job.tasks_per_node);
        if (ranks_of(config) != ranks)
          throw Refusal("run " + run.name + "'s Slurm job runs " + std::to_string(job.nodes) + " node(s) x " +
                        std::to_string(job.tasks_per_node) + " task(s) = " + std::to_string(ranks) +
                        " rank(s); layout " + req.layout.text() + " needs " +
                        std::to_string(ranks_of(config)) + ": choose one with dp*tp*pp = " +
                        std::to_string(ranks) + ", or fork the run with another job shape");
        validate_run_config(config, static_cast<int>(ranks));
        relaid = config;
      }
      impl->login = std::make_unique<remote::Session>(ssh_session_options(options_.ssh, login_node(cluster)));
      connect_or_refuse(options_.ssh, *impl->login, cluster.name, true);
      if (relaid) {
        if (!remote::poll_jobs(*impl->login, {job.job_id}).empty())
          throw Refusal(
              "slurm job " + job.job_id + " of run " + run.name +
              " is still in the queue: wait for it to leave, or watch it with flotilla runs attach " +
              run.name);
        const std::string toml = config_to_toml(*relaid);
        remote::upload_run_config(*impl->login, job.run_dir.substr(job.run_dir.find_last_of('/') + 1), toml);
        db::set_run_config(db, run.id, toml, config_to_json(*relaid, -1));
        db::add_event(db, run.id, db::now_seconds(), "layout", "info",
                      "resumed on another layout: " + req.layout.text());
      }
      try {
        impl->slurm_watch = resubmit_slurm_run(db, *impl->login, run, options_.origin, progress);
      } catch (const Error& e) {
        if (e.code() != ExitCode::kUsage) throw;
        throw Refusal(e.what());  // the old job is still in the queue: nothing was changed
      }
      impl->total_steps = impl->slurm_watch.total_steps;
      impl->where = "slurm cluster " + cluster.name + ", job " + impl->slurm_watch.job_id;
      break;
    }
  }
  return std::make_unique<ActiveRun>(std::move(impl));
}

bool RunService::moves(const db::Run& run, const Placement& where) const {
  if (where.kind != kind_of(run)) return true;
  if (where.kind != PlaceKind::kNodes) return false;
  std::string names;
  for (const auto& n : where.nodes) names += (names.empty() ? "" : ",") + n;
  return names != run.target;
}

std::unique_ptr<ActiveRun> RunService::move(const db::Run& run, const ResumeRequest& req,
                                            const Note& progress) {
  const Placement& to = *req.where;
  if (to.kind == PlaceKind::kSlurm)
    throw Refusal("run " + run.name + " ran on " + where_text(run) + "; resuming it on " + to.text() +
                  " is not supported yet: fork it there, or resume it here or on SSH nodes");
  if (kind_of(run) == PlaceKind::kHere)
    if (const auto live = live_group(run.run_dir))
      throw Refusal("run " + run.name + " " + live_group_text(run.run_dir, *live));
  RunConfig config = parse_config_toml(run.config_toml, "run " + run.name);
  apply_layout(config, req.layout);
  config.checkpoint.resume = "auto";  // the newest checkpoint, brought to the new place below
  const bool has_checkpoint = !checkpoints(run.id).empty();
  auto impl = new_impl(options_, to.kind);
  impl->how = ActiveRun::Impl::How::kResumed;
  impl->id = run.id;
  impl->name = run.name;
  impl->where = to.text();
  if (to.kind == PlaceKind::kHere) {
    // Its folder here: <runs root>/<name> when that is free or provably its own from an earlier stint
    // on this machine (the store lists a checkpoint of this run inside it); else <name>-<id>, -2, ...
    // A folder of the same name is not proof: another workspace's run of that name would lend its
    // checkpoints (the worker resumes from the newest there) and its metrics.jsonl.
    std::vector<db::CheckpointInfo> stored_checkpoints;
    {
      const db::Database rdb(options_.ssh.database_path);
      stored_checkpoints = db::list_checkpoints(rdb, run.id);
    }
    auto usable = [&](const std::string& d) {
      std::error_code ec;
      if (!fs::exists(d, ec) || fs::is_empty(d, ec)) return true;
      for (const auto& c : stored_checkpoints)
        if (c.dir.rfind(d + "/", 0) == 0) return true;
      return false;
    };
    const fs::path root(options_.runs_root);
    std::string dir = (root / run.name).string();
    for (int n = 1; !usable(dir); ++n)
      dir = (root / (run.name + "-" + std::to_string(run.id) + (n == 1 ? "" : "-" + std::to_string(n)))).string();
    config.run.out_dir = dir;
    validate_run_config(config, ranks_of(config));
    fs::create_directories(fs::path(dir) / "checkpoints");
    std::string from = "from the start (no checkpoint was written)";
    if (has_checkpoint) from = "from " + fetch_checkpoint(run.id, std::nullopt, dir + "/checkpoints");
    const std::string config_path = dir + "/run.toml";
    {
      std::ofstream f(config_path);
      f << config_to_toml(config);
      if (!f) throw Error(ExitCode::kIo, "cannot write " + config_path);
    }
    const std::string was = run.target;
    impl->writer->run([&](db::Database& wdb) {
      db::write_tx(wdb, [&] {
        db::set_run_config(wdb, run.id, config_to_toml(config), config_to_json(config, -1));
        db::set_run_dir(wdb, run.id, dir);
        // This machine's record goes on after what its metrics.jsonl holds already (an earlier stint
        // here, stored to its end) or from 0 in a new folder: never from another folder's offset.
        std::error_code size_ec;
        const auto held = fs::file_size(fs::path(dir) / "metrics.jsonl", size_ec);
        db::set_committed_offset(wdb, run.id, "metrics.jsonl", size_ec ? 0 : static_cast<int64_t>(held));
        for (const db::SshNode& n : db::run_ssh_nodes(wdb, run.id)) db::detach_node(wdb, run.id, n.id);
        db::set_run_target(wdb, run.id, "local");
        db::attach_node(wdb, run.id, db::ensure_node(wdb, "local", "local"), ranks_of(config));
        db::add_event(wdb, run.id, db::now_seconds(), "moved", "info",
                      options_.origin + ": moved from " + was + " to this machine, " + from);
      });
    });
    reprice_for_start(*impl->writer, run.id, config, req.budget_usd);
    TrainCommand c;
    c.worker = worker_of(options_);
    c.config_path = config_path;
    c.ranks = ranks_of(config);
    c.max_restarts = config.run.max_restarts;
    c.resume = true;
    c.no_bind = options_.no_bind;
    impl->local = start_local_run(impl->writer, run.id, run.name, remembered(*impl, spawn_for(options_, train_argv(c), dir)),
                                  options_.origin, config.train.steps);
    impl->total_steps = impl->local.total_steps;
    impl->folder = dir;
    return std::make_unique<ActiveRun>(std::move(impl));
  }
  // SSH nodes: the newest checkpoint (on this machine, or fetched to it) is uploaded to the run's
  // folder on the new master before any rank starts.
  db::Database db(options_.ssh.database_path);
  config.run.out_dir.clear();
  const std::string ck = has_checkpoint ? fetch_checkpoint(run.id, std::nullopt) : "";
  std::vector<Node> nodes = connect_named(options_.ssh, db, to.nodes);
  StartRequest s;
  s.config = config;
  s.name = run.name;
  s.budget_usd = req.budget_usd;
  s.nproc_per_node = ranks_per_node(config, static_cast<int>(to.nodes.size()), to.nproc_per_node);
  s.master_port = to.master_port;
  s.no_bind = to.no_bind;
  s.worker_path = worker_of(options_);
  s.version = options_.version;
  s.origin = options_.origin;
  s.existing_run = run.id;
  s.from_checkpoint = ck;
  impl->node_watch = start_on_nodes(db, nodes, s, progress);
  const RecoveryChoice choice = req.recovery.value_or(to.recovery);
  record_recovery_policy(db, run.id, policy_of(choice));
  impl->recovery = recovery_for(options_, db, choice, run.name, to.no_bind);
  impl->nodes = std::move(nodes);
  impl->total_steps = impl->node_watch.total_steps;
  impl->folder = impl->nodes[0].rec.name + ":~/.flotilla/runs/" + impl->node_watch.rid;
  return std::make_unique<ActiveRun>(std::move(impl));
}

std::unique_ptr<ActiveRun> RunService::fork(int64_t run_id, const ForkRequest& req, const Note& progress) {
  db::Database db(options_.ssh.database_path);
  const db::Run parent = db::get_run(db, run_id);
  std::string dir = req.checkpoint_dir;
  if (dir.empty()) dir = fetch_checkpoint(run_id, req.step);
  RunRequest r;
  if (kind_of(parent) == PlaceKind::kHere) {
    r.config = load_config(stored_config_file(parent), req.sets);
  } else {
    // A remote run's folder is elsewhere: its config is the store's copy.
    r.config = parse_config_toml(parent.config_toml, "run " + parent.name);
    apply_overrides(r.config, req.sets);
  }
  r.config.run.out_dir.clear();
  r.config.run.name = req.name.empty() ? parent.name + "-fork" : req.name;
  r.name = req.name;
  r.explicit_name = !req.name.empty();
  r.where = req.where.value_or(Placement::here());
  r.layout = req.layout;
  r.fork_of = parent.id;
  r.resume_from = dir;
  return start(r, progress);
}

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
  if (!writer) throw Refusal("no run database: a stop or kill is recorded there before the worker is signalled");
  db::Run run;
  writer->run([&](db::Database& db) { run = db::get_run(db, run_id); });
  const Abilities can = abilities(run);
  if (const std::string& why = kill ? can.kill : can.stop; !why.empty()) throw Refusal(why);
  const pid_t pid = kind_of(run) == PlaceKind::kHere ? live_worker_pid(run.run_dir) : 0;
  if (pid <= 0)
    throw Refusal("run " + run.name + " is not running on this machine; stop it from the command or app that " +
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
    a.resume = "run " + run.name + " is running (its worker, pid " + std::to_string(live_worker_pid(run.run_dir)) +
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
  if (!running && run.status != db::RunStatus::kQueued) a.stop = "run " + run.name + " is not running";
  else if (kind == PlaceKind::kHere && !live_here)
    a.stop = "run " + run.name + " has no live worker on this machine (its worker.pid names no running process)";
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
