// The runs service (see service.h): one face over the places a run executes. This file: the
// helpers the service's files share (service_internal.h), starting a new run and attaching to a
// running one. Resume, move and fork: service_resume.cpp; requests to a running run and its
// checkpoints: service_requests.cpp; what a front end shows: service_answers.cpp; ActiveRun:
// active_run.cpp.
#include "runs/service.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "db/clusters.h"
#include "db/errors.h"
#include "db/nodes.h"
#include "db/run_store.h"
#include "engine/config/config_io.h"
#include "engine/core/error.h"
#include "remote/session.h"
#include "runs/fault_point.h"
#include "runs/local_run.h"
#include "runs/node_run.h"
#include "runs/process.h"
#include "runs/run_setup.h"
#include "runs/service_internal.h"
#include "runs/slurm_run.h"
#include "runs/worker_command.h"

namespace flotilla::runs {

namespace fs = std::filesystem;

namespace service_detail {

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

std::string new_run_name(const db::Database& db, const std::string& asked, const std::string& from_config) {
  if (asked.empty()) {
    check_new_run_name(from_config);
    return db::unique_run_name(db, from_config);
  }
  if (db::find_run(db, asked))
    throw db::DbError(db::DbErrorKind::kConstraint,
                      "a run named '" + asked +
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

std::vector<Node> connect_named(const SshAccess& access, db::Database& db,
                                const std::vector<std::string>& names) {
  std::vector<Node> nodes;
  for (const auto& n : names) nodes.push_back(Node{db::get_ssh_node(db, n), nullptr, ""});
  connect_nodes(nodes, access);
  return nodes;
}

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

std::unique_ptr<ActiveRun::Impl> stored_impl(const RunService& service, const db::Run& run,
                                             ActiveRun::Impl::How how) {
  auto impl = new_impl(service.options(), kind_of(run));
  impl->how = how;
  impl->id = run.id;
  impl->name = run.name;
  impl->where = RunService::where_text(run);
  impl->folder = service.folder_text(run);
  return impl;
}

TrainCommand train_command(const ServiceOptions& o, const std::string& config_path, const RunConfig& config,
                           bool resume) {
  TrainCommand c;
  c.worker = worker_of(o);
  c.config_path = config_path;
  c.ranks = ranks_of(config);
  c.max_restarts = config.run.max_restarts;
  c.resume = resume;
  c.no_bind = o.no_bind;
  return c;
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

SpawnOptions remembered(ActiveRun::Impl& m, SpawnOptions spawn) {
  m.command = command_line(spawn.argv);
  return spawn;
}

}  // namespace service_detail

using namespace service_detail;

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

RunService::RunService(ServiceOptions options) : options_(std::move(options)) {}
RunService::~RunService() = default;

db::Writer* RunService::writer() {
  if (options_.writer) return options_.writer;
  if (options_.ssh.database_path.empty()) return nullptr;
  if (!own_writer_) own_writer_ = std::make_unique<db::Writer>(options_.ssh.database_path);
  return own_writer_.get();
}

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
        argv = train_argv(train_command(options_, nr.config_path, nr.config, false));
      }
      impl->local = start_local_run(impl->writer, nr.run_id, nr.name,
                                    remembered(*impl, spawn_for(options_, argv, nr.run_dir)), options_.origin,
                                    req.demo ? req.demo_steps : nr.config.train.steps);
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
  auto impl = stored_impl(*this, run, ActiveRun::Impl::How::kAttached);
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

}  // namespace flotilla::runs
