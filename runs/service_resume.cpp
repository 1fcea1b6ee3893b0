// The runs service (see service.h), continued: a halted run started again from its newest
// checkpoint, where it ran (resume) or on another place (move: this machine <-> SSH nodes, other
// nodes; the checkpoint brought there), and a new run from another's checkpoint (fork).
#include <algorithm>
#include <filesystem>
#include <fstream>

#include "db/database.h"
#include "db/ingest.h"
#include "db/nodes.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "engine/config/config_io.h"
#include "engine/core/error.h"
#include "remote/remote_run.h"
#include "remote/session.h"
#include "remote/slurm_cluster.h"
#include "runs/local_run.h"
#include "runs/node_run.h"
#include "runs/process.h"
#include "runs/run_setup.h"
#include "runs/service.h"
#include "runs/service_internal.h"
#include "runs/slurm_run.h"
#include "runs/worker_command.h"

namespace flotilla::runs {

namespace fs = std::filesystem;
using namespace service_detail;

std::unique_ptr<ActiveRun> RunService::resume(int64_t run_id, const ResumeRequest& req,
                                              const Note& progress) {
  db::Database db(options_.ssh.database_path);
  const db::Run run = db::get_run(db, run_id);
  const PlaceKind kind = kind_of(run);
  if (const std::string why = abilities(run).resume; !why.empty()) throw Refusal(why);
  if (req.where && moves(run, *req.where)) return move(run, req, progress);
  auto impl = stored_impl(*this, run, ActiveRun::Impl::How::kResumed);
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
      TrainCommand c = train_command(options_, config_file, config, true);
      c.sets = {"run.out_dir=" + run.run_dir};
      for (const auto& s : req.layout.sets()) c.sets.push_back(s);
      try {
        impl->local = start_local_run(impl->writer, run.id, run.name,
                                      remembered(*impl, spawn_for(options_, train_argv(c), run.run_dir)),
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
      dir = (root / (run.name + "-" + std::to_string(run.id) + (n == 1 ? "" : "-" + std::to_string(n))))
                .string();
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
    const TrainCommand c = train_command(options_, config_path, config, true);
    impl->local = start_local_run(impl->writer, run.id, run.name,
                                  remembered(*impl, spawn_for(options_, train_argv(c), dir)), options_.origin,
                                  config.train.steps);
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

}  // namespace flotilla::runs
