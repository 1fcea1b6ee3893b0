// The runs service: the one face the CLI and the app use for every run, wherever it executes
// (this machine, a set of SSH nodes, a Slurm cluster). Create and start, attach (also after an app
// restart), watch, stop, checkpoint now, kill, resume (here or elsewhere, on the same or another
// layout), fork, list checkpoints, fetch a checkpoint to this machine, and the answers a front end
// shows (where a run runs, its status in words, what it can do now and why not).
//
// Decision: a front end never asks what kind of run it holds. "Where" is a value (Placement) the
// service turns into a Place (runs/place.h); every answer that differs by place (can it checkpoint
// now, where are its checkpoints, how is it resumed) comes from the service as data or a sentence.
// Watching is one blocking loop on the caller's thread (the CLI's main thread, a thread per run in
// the app) polling the hooks of watch.h; the status changes only through run_status.h. Refusals
// that change nothing come back as runs::Refusal (ssh_options.h) with the sentence to show.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "db/run_store.h"
#include "db/writer.h"
#include "engine/config/run_config.h"
#include "runs/placement.h"
#include "runs/pricing.h"
#include "runs/run_status.h"
#include "runs/ssh_options.h"
#include "runs/stale_runs.h"
#include "runs/watch.h"

namespace flotilla::runs {

struct ServiceOptions {
  SshAccess ssh;            // ssh.database_path: the run store ("": runs are not stored, this machine only)
  std::string runs_root;    // where local run folders go when run.out_dir is empty (absolute)
  std::string worker_path;  // the local flotilla-worker ("": find_worker())
  std::string version;      // the bundle's version folder deployed on nodes and clusters
  std::string origin = "flotilla run";  // prefixes status reasons ("flotilla app")
  std::string working_dir;              // a local worker's working directory ("": this process's)
  bool stop_with_parent = true;         // a local worker gets SIGTERM when this process dies (the CLI)
  std::vector<std::string> worker_env;  // extra KEY=VALUE for a local worker
  bool no_bind = false;                 // launch --no-bind for a local worker (no CPU pinning)
  // Where a node run's checkpoints are mirrored and fetched: <dir>/<run name> ("": next to the
  // run database, checkpoints/).
  std::string checkpoints_root;
  // The writer to store through ("nullptr": the service opens its own on ssh.database_path).
  db::Writer* writer = nullptr;
};

// A new run.
struct RunRequest {
  RunConfig config;            // loaded, every --set applied
  std::string name;            // "": config.run.name (NAME-2, ... when taken)
  bool explicit_name = false;  // refuse a taken name instead of picking NAME-2
  Placement where;
  Layout layout;  // applied over config.parallel before anything is validated
  std::optional<double> budget_usd;
  std::optional<int> max_restarts;
  std::optional<int64_t> fork_of;
  std::string resume_from;  // a checkpoint folder the new run starts from (a fork)
  std::string notes;
  bool demo = false;  // `flotilla-worker demo` on this machine (its own config)
  int64_t demo_steps = 0;
  std::vector<std::string> demo_sets;  // KEY=VALUE overrides of the demo's config (`--set`)
  // Runs on nodes or a cluster: polled while a model by name is fetched there before the start;
  // true stops the start (the run is recorded stopped). May be empty.
  std::function<bool()> cancelled;
};

struct ResumeRequest {
  std::optional<Placement> where;  // nullopt: where it ran
  Layout layout;                   // over the layout it ran with
  std::optional<double> budget_usd;
  std::optional<RecoveryChoice> recovery;  // runs on nodes: nullopt keeps what the run was started with
};

struct ForkRequest {
  std::optional<int64_t> step;     // the checkpoint to fork from (nullopt: the newest)
  std::string checkpoint_dir;      // or a checkpoint folder on this machine, as checkpoints() listed it
  std::string name;                // "": <parent>-fork (NAME-2, ... when taken)
  std::optional<Placement> where;  // nullopt: where the parent ran
  Layout layout;
  std::vector<std::string> sets;  // more config overrides (KEY=VALUE)
};

// What a stored run can do now: "" when it can, else why not (a sentence to show).
// stop, checkpoint, kill: whether the run can be asked now, by whoever watches it or (a run on
// this machine whose worker this process can signal: its pid and start time checked) by anyone.
struct Abilities {
  std::string attach, resume, stop, checkpoint, kill, fork, fetch, remove;
};

struct CheckpointEntry {
  int64_t step = 0;
  std::string where;      // "node a:/home/u/.flotilla/runs/x-3/checkpoints/step-20", a local folder
  std::string local_dir;  // the folder on this machine ("" when it lives elsewhere: fetch it)
  int64_t bytes = 0;      // 0 when unknown
  std::string reason;     // the worker's reason ("periodic", "stop", ...; "" when unknown)
};

// How a watch ended.
struct WatchResult {
  int exit_code = -1;  // the worker's exit code; kLeft when left; ExitCode::kComm when the place was lost
  int signal = 0;
  RunEnd end;
  bool recorded = true;    // the end reached the store
  bool stored_all = true;  // every metrics line reached the store
  std::string store_error;
  int64_t last_step = 0;
  std::string root_cause;
  bool vanished = false;        // the run's row was deleted while it ran
  uint64_t committed_rows = 0;  // metrics rows this watch stored
};

// A run this process started, attached to or resumed; watch it on one thread.
class ActiveRun {
 public:
  struct Impl;
  explicit ActiveRun(std::unique_ptr<Impl> impl);
  ~ActiveRun();  // leaves the run running where it is when it was not watched to its end
  ActiveRun(const ActiveRun&) = delete;
  ActiveRun& operator=(const ActiveRun&) = delete;

  int64_t id() const;  // 0 for an unstored run
  const std::string& name() const;
  std::string where_text() const;   // "this machine", "nodes a, b", "slurm cluster hpc, job 12"
  std::string folder_text() const;  // the run's folder as a user finds it
  int64_t total_steps() const;
  bool running_when_found() const;  // attach: the worker was still going (else it had exited)
  // Why this run cannot be asked for a checkpoint now ("" when it can).
  std::string checkpoint_refusal() const;
  // The worker's command line on this machine ("" elsewhere, or when it is not known), its pid
  // there (0 elsewhere), and the Slurm job's id ("" for a run not on a cluster).
  std::string command_line() const;
  int64_t local_pid() const;
  std::string job_id() const;
  // The one line a terminal prints once the run is started, attached or resumed, worded by its
  // place as `flotilla` always said it ("run x (id 3): /home/u/runs/x", "attached to run x (id 3)
  // on 2 node(s), remote dir ~/.flotilla/runs/x-3, running", "run x: resumed as slurm job 13 on
  // cluster hpc").
  std::string headline() const;

  // Blocks until the run ends (or hooks.leave_requested), storing its metrics by committed byte
  // offset, guarding its budget, polling the hooks' stop/checkpoint/kill requests, recovering after a
  // preemption as the place allows, and recording its end through run_status.h.
  WatchResult watch(const WatchHooks& hooks);

 private:
  std::unique_ptr<Impl> impl_;
};

class RunService {
 public:
  explicit RunService(ServiceOptions options);
  // Where a stored run ran (its nodes, the master first; its cluster), as a value a front end can
  // offer back for a resume or fork without reading the run's target itself.
  static Placement placement_of(const db::Run& run);
  // Whether a run placed at `where` will take "Checkpoint now" ("" when it will), before it exists.
  static std::string checkpoint_refusal(const Placement& where);
  ~RunService();
  const ServiceOptions& options() const { return options_; }

  // Creates the run in one place (the config validated for its layout; one naming rule,
  // check_new_run_name, NAME-2 when taken; its row, price and limits stored) and starts it where it
  // is placed. Throws flotilla::Error (kConfig/kUsage) for bad input, DbError for a refused store,
  // Refusal for an untrusted host; nothing is left behind.
  std::unique_ptr<ActiveRun> start(const RunRequest& request, const Note& progress = {});
  // Re-attaches a run left running (by this process earlier, another command, an app that exited).
  // Throws Refusal with why not (abilities().attach).
  // `recovery`: a run on nodes recovers from a preemption as this says, not as it was started.
  std::unique_ptr<ActiveRun> attach(int64_t run_id, const Note& progress = {},
                                    const std::optional<RecoveryChoice>& recovery = std::nullopt);
  // Starts a halted run again from its newest verified checkpoint, in the same row: where it ran
  // or elsewhere (this machine <-> SSH nodes, other nodes; the checkpoint is brought there), on its
  // layout or another one (this machine, SSH nodes). Throws Refusal (abilities().resume), also for
  // what is not supported (onto a Slurm cluster; a Slurm run on another layout).
  std::unique_ptr<ActiveRun> resume(int64_t run_id, const ResumeRequest& request, const Note& progress = {});
  // A new run (recorded as a fork of `run_id`) starting from one of its checkpoints.
  std::unique_ptr<ActiveRun> fork(int64_t run_id, const ForkRequest& request, const Note& progress = {});

  // Asks a run watched by another process (or nobody) for a checkpoint at its next step. Throws
  // Refusal when it cannot.
  void request_checkpoint(int64_t run_id);
  // Asks a run on this machine watched by another process (`flotilla run` in a terminal) or by
  // nobody to stop with a checkpoint (kill false: stop.request, then SIGTERM) or to end at once
  // (kill true: SIGKILL of its worker's tree). The request is stored first (db::add_end_request), so
  // whoever sees the end records "stopped (on request)" or "stopped (killed on request)". `by`
  // names the asker ("flotilla app"). Throws Refusal (abilities().stop / .kill) when it cannot.
  void request_end(int64_t run_id, bool kill, const std::string& by);

  // The run's checkpoints that exist now, oldest first (`purged`: written but since removed).
  std::vector<CheckpointEntry> checkpoints(int64_t run_id, int* purged = nullptr);
  // A checkpoint on this machine: its own folder for a local run, else fetched into `out_dir`
  // ("": the checkpoints root). Throws Refusal naming the steps there are when `step` is not one.
  std::string fetch_checkpoint(int64_t run_id, std::optional<int64_t> step, const std::string& out_dir = "");

  Abilities abilities(const db::Run& run) const;
  // "this machine", "nodes a, b", "slurm cluster hpc" for a stored run.
  static std::string where_text(const db::Run& run);
  // The run's folder as a user finds it ("/home/u/runs/x", "a:/home/u/.flotilla/runs/x-3",
  // "hpc:~/.flotilla/runs/x-3").
  std::string folder_text(const db::Run& run) const;
  // Settles runs the store has as running whose worker on this machine is gone (stale_runs.h):
  // what every command and the app's start do first. Never throws for the store's sake.
  std::vector<SettledRun> settle_stale();
  // The stored runs an app starting up re-attaches: running on nodes, or a Slurm job not ended.
  // (Local workers left running are found by their folders: attach them by id.)
  std::vector<int64_t> attachable_runs() const;

 private:
  // Whether resuming `run` on `where` moves it to another place (another kind, or other nodes).
  bool moves(const db::Run& run, const Placement& where) const;
  // Resume on another place: the same row, its newest checkpoint brought there.
  std::unique_ptr<ActiveRun> move(const db::Run& run, const ResumeRequest& request, const Note& progress);
  ServiceOptions options_;
  std::unique_ptr<db::Writer> own_writer_;
  db::Writer* writer();
};

}  // namespace flotilla::runs
