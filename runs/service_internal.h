// Internal to the runs service (runs/service*.cpp and active_run.cpp; nothing else includes it):
// an ActiveRun's state and the helpers the service's files share.
//
// Decision: RunService is one class whose methods live in several files by what they do
// (service.cpp: start and attach; service_resume.cpp: resume, move, fork; service_requests.cpp:
// asking a running run and its checkpoints; service_answers.cpp: what a front end shows;
// active_run.cpp: ActiveRun). What more than one of them needs is declared here once, in
// service_detail, and defined in service.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "db/database.h"
#include "db/run_store.h"
#include "db/writer.h"
#include "engine/config/run_config.h"
#include "remote/session.h"
#include "runs/local_run.h"
#include "runs/node_run.h"
#include "runs/process.h"
#include "runs/service.h"
#include "runs/slurm_run.h"
#include "runs/worker_command.h"

namespace flotilla::runs {

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

namespace service_detail {

PlaceKind kind_of(const db::Run& run);
void apply_layout(RunConfig& config, const Layout& layout);
int64_t steps_of(const db::Run& run);
// The one naming rule for a run that is not on this machine (create_local_run applies the same to
// local runs): a name asked for must be free; else the config's name, NAME-2 when taken.
std::string new_run_name(const db::Database& db, const std::string& asked, const std::string& from_config);
std::string worker_of(const ServiceOptions& o);
std::string checkpoints_root(const ServiceOptions& o);
std::vector<Node> connect_named(const SshAccess& access, db::Database& db,
                                const std::vector<std::string>& names);
// A placement's recovery choice as the store records it (whoever re-attaches recovers the same way).
RecoveryPolicy policy_of(const RecoveryChoice& choice);
Recovery recovery_for(const ServiceOptions& o, db::Database& db, const RecoveryChoice& choice,
                      const std::string& run_name, bool no_bind);

// The master node and the remote run id of a run on nodes or a cluster's login node.
struct RemoteFolder {
  std::unique_ptr<remote::Session> session;
  std::string host_name;  // the node's or cluster's name
  std::string rid;
  std::string dir;  // the folder there
};

RemoteFolder open_remote_folder(const ServiceOptions& o, db::Database& db, const db::Run& run);
// An Impl writing through the service's writer when it has one, else through its own.
std::unique_ptr<ActiveRun::Impl> new_impl(const ServiceOptions& o, PlaceKind kind);
// An Impl for a stored run where it is (attach, resume in place): its id, name, place and folder.
std::unique_ptr<ActiveRun::Impl> stored_impl(const RunService& service, const db::Run& run,
                                             ActiveRun::Impl::How how);
// The worker's command line for a local run's config file (resume: from its newest checkpoint).
TrainCommand train_command(const ServiceOptions& o, const std::string& config_path, const RunConfig& config,
                           bool resume);
SpawnOptions spawn_for(const ServiceOptions& o, std::vector<std::string> argv, const std::string& run_dir);
// A local start's spawn, its command line kept for ActiveRun::command_line().
SpawnOptions remembered(ActiveRun::Impl& m, SpawnOptions spawn);

}  // namespace service_detail
}  // namespace flotilla::runs
