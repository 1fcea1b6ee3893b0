// `flotilla run CONFIG.toml`, `flotilla runs resume RUN` and `flotilla runs attach RUN` for runs on
// this machine: the terminal around the runs layer's lifecycle (runs/local_run.h).
//
// Decision: this file only parses, prints and turns signals into requests. Creating, naming,
// pricing and storing the run, starting the worker, storing its metrics by byte offset, the
// budget, and how the run ends are the runs layer's, exactly as for a run started from the app.
// SIGINT, SIGTERM and SIGHUP (the terminal closed) are each a stop request: the worker checkpoints
// and exits 10 and the run is recorded stopped; if this process is killed outright, the worker gets
// SIGTERM from its parent-death signal and stops the same way, and the next command settles the
// run from its files. SIGPIPE is ignored: a terminal or pipe that went away must not kill the
// command that is recording the run.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "app/cli/cli.h"
#include "app/cli/run_nodes.h"
#include "app/cli/run_slurm.h"
#include "runs/slurm_run.h"
#include "db/costs.h"
#include "db/errors.h"
#include "db/queries.h"
#include "db/run_store.h"
#include "db/writer.h"
#include "engine/config/config_io.h"
#include "engine/core/error.h"
#include "runs/local_run.h"
#include "runs/node_run.h"
#include "runs/run_setup.h"
#include "runs/run_speed.h"
#include "runs/worker_command.h"

namespace flotilla::cli {
namespace {

namespace fs = std::filesystem;

std::atomic<int> g_signal{0};
void on_stop_signal(int sig) {
  int none = 0;
  g_signal.compare_exchange_strong(none, sig);
}

// While alive: SIGINT, SIGTERM, SIGHUP only set g_signal (the watch turns it into one stop
// request); SIGPIPE is ignored.
class TerminalSignals {
 public:
  TerminalSignals() {
    g_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &old_[0]);
    ::sigaction(SIGTERM, &sa, &old_[1]);
    ::sigaction(SIGHUP, &sa, &old_[2]);
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ign, &old_[3]);
  }
  ~TerminalSignals() {
    const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};
    for (int i = 0; i < 4; ++i) ::sigaction(sigs[i], &old_[i], nullptr);
  }
  TerminalSignals(const TerminalSignals&) = delete;
  TerminalSignals& operator=(const TerminalSignals&) = delete;

 private:
  struct sigaction old_[4]{};
};

void print_progress(const MetricsRecord& e, int64_t total_steps) {
  static auto last = std::chrono::steady_clock::time_point{};
  const auto now = std::chrono::steady_clock::now();
  if (e.type == MetricsRecordType::kStep) {
    if (e.rank != 0) return;
    const StepRecord& s = e.step();
    if (now - last < std::chrono::seconds(1) && s.step != total_steps) return;
    last = now;
    // A null MFU (the ceiling read below the run's speed) reads as 0: not known, so "n/a".
    char mfu[32] = "n/a";
    if (s.mfu > 0) std::snprintf(mfu, sizeof mfu, "%.1f%%", s.mfu * 100);
    std::printf("step %lld/%lld  loss %s  %s tok/s  mfu %s\n", static_cast<long long>(s.step),
                static_cast<long long>(total_steps), format_number(s.loss).c_str(),
                format_number(s.tokens_per_s).c_str(), mfu);
  } else if (e.type == MetricsRecordType::kEval) {
    std::printf("eval at step %lld  val_loss %s\n", static_cast<long long>(e.eval().step),
                format_number(e.eval().val_loss).c_str());
  } else if (e.type == MetricsRecordType::kCheckpoint) {
    std::printf("checkpoint at step %lld  %s\n", static_cast<long long>(e.checkpoint().step),
                e.checkpoint().dir.c_str());
  } else if (e.type == MetricsRecordType::kEvent &&
             (e.event().level == "warning" || e.event().level == "error")) {
    std::printf("%s: %s\n", e.event().level.c_str(), e.event().message.c_str());
  } else if (e.type == MetricsRecordType::kRunStart) {
    std::printf("worker started at step %lld\n", static_cast<long long>(e.run_start().start_step));
  } else {
    return;
  }
  std::fflush(stdout);
}

// Watches `w` until its worker ends (the caller holds a TerminalSignals) and prints the summary.
int watch(const Context& ctx, db::Writer& writer, const runs::LocalWatch& w, bool quiet) {
  runs::WatchHooks hooks;
  hooks.note = [](const std::string& text) { std::fprintf(stderr, "flotilla: %s\n", text.c_str()); };
  if (!quiet) hooks.on_record = [&](const MetricsRecord& e) { print_progress(e, w.total_steps); };
  hooks.stop_requested = [] { return g_signal.load() != 0; };
  const runs::LocalOutcome out = runs::watch_local_run(&writer, w, hooks);
  // Its row was deleted while it ran (runs delete --force of a run nobody marked as running): the
  // watcher said so once and stopped the worker; there is no run left to summarise.
  if (out.vanished) return kExitNotFound;
  const db::WriterStats ws = writer.stats();
  if (!quiet) {
    const db::Database reader(database_path(ctx));
    const db::RunSummary s = runs::run_summary(reader, w.run_id);
    const db::Run r = db::get_run(reader, w.run_id);
    const bool priced = r.usd_per_hour && *r.usd_per_hour > 0;
    std::printf("run %s %s: %lld steps, final loss %s, %s, %llu metric rows stored, %s\n", w.name.c_str(),
                out.recorded ? runs::status_text(r).c_str() : "(end not recorded)",
                static_cast<long long>(s.steps), s.final_loss ? format_number(*s.final_loss).c_str() : "-",
                format_duration(s.wall_s).c_str(), static_cast<unsigned long long>(ws.committed_rows),
                priced ? format_usd(db::run_cost_usd(reader, w.run_id)).c_str() : "unpriced");
  }
  if (out.end.status == db::RunStatus::kFailed) {
    // What the worker said last: the reason is usually there (a missing shard, a bad value).
    for (const std::string& line : runs::worker_log_tail(w.run_dir, 6))
      std::fprintf(stderr, "flotilla: worker.log: %s\n", line.c_str());
  }
  if (!out.stored_all || !out.recorded) {
    std::fprintf(stderr,
                 "flotilla: the run database could not store everything (%s); metrics.jsonl in %s has every "
                 "record: once the database has space again, any `flotilla runs` command stores the rest and "
                 "the run's end\n",
                 out.store_error.c_str(), w.run_dir.c_str());
    return out.exit_code == 0 ? kExitStore : out.exit_code;
  }
  return out.exit_code;
}

int read_restarts(ArgReader& args) {
  const std::optional<double> v = args.number("--max-restarts");
  if (!v) return -1;
  if (*v < 0 || *v > 100 || *v != static_cast<double>(static_cast<int>(*v)))
    throw UsageError("--max-restarts needs a whole number from 0 to 100");
  return static_cast<int>(*v);
}

}  // namespace

int cmd_run(const Context& ctx) {
  ArgReader args(ctx.args, "run");
  if (args.flag("--help")) {
    std::printf(
        "Usage: flotilla run CONFIG.toml [--name NAME] [--set KEY=VALUE]... [--budget USD] [--max-restarts "
        "K]\n"
        "                    [--quiet]\n"
        "                    [--nodes A,B,... [--nproc-per-node N] [--master-port P] [--no-bind]\n"
        "                     [--auto-recover [--spare C,D,...] [--max-recoveries K] [--recover-after S]\n"
        "                                     [--mirror-checkpoints]]]\n"
        "                    [--cluster NAME [--nodes N] [--tasks-per-node T] [--gpus-per-node G]\n"
        "                     [--time HH:MM:SS] [--partition P] [--account A] [--signal-lead S]\n"
        "                     [--auto-resume]]\n\n"
        "Starts the training worker on this machine (flotilla-worker launch with parallel.dp*tp*pp ranks),\n"
        "stores its metrics in the run database as they arrive, prints progress, and exits with the\n"
        "worker's exit status. Ctrl-C (or a closed terminal) stops the worker at the next step with a\n"
        "checkpoint (exit 10); flotilla runs resume NAME continues it. The config is checked first: an\n"
        "invalid one starts nothing.\n\n"
        "--budget USD caps the run's spend (it overrides budget.max_usd): at the cap the worker stops\n"
        "with a checkpoint. The run is priced by budget.usd_per_hour, else the machine's price\n"
        "(flotilla pricing node local ...); a budget on an unpriced machine is refused.\n"
        "--max-restarts K: crash restarts from the last verified checkpoint (run.max_restarts, default "
        "2).\n\n"
        "With --nodes, the run spans those SSH nodes (flotilla nodes list), N ranks each (default\n"
        "parallel.dp*tp*pp / nodes): the worker is deployed to each node, started detached there, and rank\n"
        "0's metrics are tailed into the store; a dropped connection reconnects and re-attaches, Ctrl-C\n"
        "stops every node. The first node is the master.\n\n"
        "With --auto-recover, a preempted run (a node's worker stopped by SIGTERM: exit 10) is started\n"
        "again by itself, after S seconds (default 20), from its newest checkpoint: nodes that no longer\n"
        "answer are replaced by the --spare nodes, or their ranks go to the nodes that remain (the\n"
        "number of ranks stays dp*tp*pp). At most K recoveries (default 3). The master must remain,\n"
        "unless --mirror-checkpoints copies each checkpoint to the workspace as it is written: then a\n"
        "lost master is replaced too and the newest copy is uploaded to the new one.\n\n"
        "With --cluster, the run is one Slurm job on that cluster (flotilla clusters list): N nodes\n"
        "(default 1) x T tasks (default dp*tp*pp / N), one flotilla-worker per task started by srun, a\n"
        "finite time limit (default 01:00:00). S seconds before it (default 300) the run checkpoints and\n"
        "exits; with --auto-resume the job is then requeued and resumes from that checkpoint. Ctrl-C\n"
        "cancels the job (the worker checkpoints first). docs/slurm.md.\n");
    return kExitOk;
  }
  std::optional<std::string> name = args.value("--name");
  std::vector<std::string> sets = args.values("--set");
  const std::optional<double> budget = args.number("--budget");
  const int max_restarts = read_restarts(args);
  const bool quiet = args.flag("--quiet");
  const std::optional<std::string> cluster = args.value("--cluster");
  const std::optional<std::string> node_list = args.value("--nodes");
  const std::optional<double> tasks_opt = args.number("--tasks-per-node");
  const std::optional<double> gpus_opt = args.number("--gpus-per-node");
  const std::optional<std::string> time_limit = args.value("--time");
  const std::optional<std::string> partition = args.value("--partition");
  const std::optional<std::string> account = args.value("--account");
  const std::optional<double> lead_opt = args.number("--signal-lead");
  const bool auto_resume = args.flag("--auto-resume");
  if (!cluster && (tasks_opt || gpus_opt || time_limit || partition || account || lead_opt || auto_resume))
    throw UsageError(
        "--tasks-per-node, --gpus-per-node, --time, --partition, --account, --signal-lead and --auto-resume "
        "go "
        "with --cluster");
  const std::optional<double> nproc_opt = args.number("--nproc-per-node");
  const std::optional<double> master_port = args.number("--master-port");
  const bool no_bind = args.flag("--no-bind");
  const RecoveryRequest recovery = read_recovery_options(args);
  if ((!node_list || cluster) && (nproc_opt || master_port || no_bind || recovery.auto_recover))
    throw UsageError("--nproc-per-node, --master-port, --no-bind and --auto-recover go with --nodes");
  if (budget && !(*budget > 0)) throw UsageError("--budget needs a positive number of dollars");
  if (name) {
    // The runs layer's one naming rule, before the store is opened or anything is created.
    try {
      runs::check_new_run_name(*name);
    } catch (const Error& e) {
      throw UsageError(std::string("--name: ") + e.what());
    }
  }
  const auto pos = args.positionals();
  if (pos.size() != 1) throw UsageError("run needs exactly one CONFIG.toml (flotilla run --help)");
  const std::string config_path = fs::absolute(pos[0]).string();

  RunConfig config;
  try {
    config = load_config(config_path, sets);
    if (max_restarts >= 0) config.run.max_restarts = max_restarts;
    // Validated before anything is created or started: an invalid run starts no process.
    if (!node_list && !cluster) runs::validate_run_config(config, runs::ranks_of(config));
    if (!name) runs::check_new_run_name(config.run.name);  // run.name from the config
  } catch (const Error& e) {
    std::fprintf(stderr, "flotilla: %s\n", e.what());
    return static_cast<int>(e.code());
  }
  db::Database db = open_store(ctx, "flotilla run");
  if (name && db::find_run(db, *name))
    throw UsageError("a run named '" + *name +
                     "' already exists: choose another --name, or continue it with " +
                     "flotilla runs resume " + *name);
  if (cluster) {
    const auto whole = [](const std::optional<double>& v, const char* opt, int lo,
                          int hi) -> std::optional<int> {
      if (!v) return std::nullopt;
      if (*v < lo || *v > hi || *v != static_cast<double>(static_cast<int>(*v)))
        throw UsageError(std::string(opt) + " needs a whole number from " + std::to_string(lo) + " to " +
                         std::to_string(hi));
      return static_cast<int>(*v);
    };
    ClusterRunRequest req;
    if (node_list) {
      char* end = nullptr;
      const long n = std::strtol(node_list->c_str(), &end, 10);
      if (node_list->empty() || *end != '\0' || n < 1 || n > 100000)
        throw UsageError("with --cluster, --nodes needs a number of nodes (is '" + *node_list + "')");
      req.nodes = static_cast<int>(n);
    }
    req.tasks_per_node = whole(tasks_opt, "--tasks-per-node", 1, 1024);
    req.gpus_per_node = whole(gpus_opt, "--gpus-per-node", 0, 1024).value_or(0);
    req.signal_lead_s = whole(lead_opt, "--signal-lead", 0, 86400).value_or(300);
    if (time_limit) req.time_limit = *time_limit;
    if (partition) req.partition = *partition;
    if (account) req.account = *account;
    req.auto_resume = auto_resume;
    if (!name) {
      name = db::unique_run_name(db, config.run.name);
      if (*name != config.run.name)
        std::printf("a run named %s exists; this run is %s\n", config.run.name.c_str(), name->c_str());
    }
    config.run.name = *name;
    req.config = config;
    req.name = *name;
    req.cluster = *cluster;
    req.budget_usd = budget;
    req.quiet = quiet;
    return run_on_cluster(ctx, req);
  }
  if (node_list) {
    if (!name) {
      name = db::unique_run_name(db, config.run.name);
      if (*name != config.run.name)
        std::printf("a run named %s exists; this run is %s\n", config.run.name.c_str(), name->c_str());
    }
    config.run.name = *name;
    NodesRunRequest req;
    req.nodes = parse_node_list(*node_list);
    req.config = config;
    req.name = *name;
    req.budget_usd = budget;
    if (nproc_opt) {
      if (*nproc_opt < 1 || *nproc_opt > 1024 ||
          *nproc_opt != static_cast<double>(static_cast<int>(*nproc_opt)))
        throw UsageError("--nproc-per-node needs a whole number from 1 to 1024");
      req.nproc_per_node = static_cast<int>(*nproc_opt);
    }
    if (master_port) {
      if (*master_port < 1 || *master_port > 65535 ||
          *master_port != static_cast<double>(static_cast<int>(*master_port)))
        throw UsageError("--master-port needs a port number from 1 to 65535");
      req.master_port = static_cast<int>(*master_port);
    }
    req.no_bind = no_bind;
    req.quiet = quiet;
    req.recovery = recovery;
    for (const auto& spare : req.recovery.spares)
      if (std::find(req.nodes.begin(), req.nodes.end(), spare) != req.nodes.end())
        throw UsageError("--spare names node '" + spare + "', which is already in --nodes");
    return run_on_nodes(ctx, req);
  }

  const std::string worker = runs::find_worker();
  db::Writer writer(database_path(ctx));
  runs::NewRunRequest req;
  req.config = config;
  req.name = name.value_or("");
  req.explicit_name = name.has_value();
  req.runs_root = (fs::current_path() / "runs").string();
  req.budget_usd = budget;
  const runs::NewRun nr = runs::create_local_run(writer, req);
  if (!name && nr.name != config.run.name)
    std::printf("a run named %s exists; this run is %s\n", config.run.name.c_str(), nr.name.c_str());

  runs::TrainCommand command;
  command.worker = worker;
  command.config_path = nr.config_path;
  command.ranks = runs::ranks_of(nr.config);
  command.max_restarts = nr.config.run.max_restarts;
  runs::SpawnOptions spawn;
  spawn.argv = runs::train_argv(command);
  spawn.run_dir = nr.run_dir;
  spawn.working_dir = fs::current_path().string();  // relative paths in the config mean what they meant here
  spawn.stop_with_parent = true;
  const TerminalSignals signals;  // before the start: a Ctrl-C from now on stops the run cleanly
  const runs::LocalWatch w =
      runs::start_local_run(&writer, nr.run_id, nr.name, spawn, "flotilla run", nr.config.train.steps);
  if (!quiet) {
    std::printf("run %s (id %lld): %s\n", nr.name.c_str(), static_cast<long long>(nr.run_id),
                nr.run_dir.c_str());
    if (nr.price.priced())
      std::printf("price $%.4g/h (%s)%s\n", nr.price.usd_per_hour, nr.price.source.c_str(),
                  nr.limits.max_usd ? ("; budget $" + format_number(*nr.limits.max_usd)).c_str() : "");
    std::fflush(stdout);
  }
  return watch(ctx, writer, w, quiet);
}

int resume_run(const Context& ctx, const std::string& name, const RecoveryRequest& recovery, bool quiet) {
  db::Database db = open_store(ctx, "flotilla runs resume");
  const db::Run run = db::get_run(db, name);
  if (runs::is_node_run_dir(run.run_dir)) return resume_nodes_run(ctx, name, recovery, quiet);
  if (runs::is_slurm_run(run)) {
    if (recovery.auto_recover)
      throw UsageError("--auto-recover is for runs on SSH nodes; a Slurm run requeues with --auto-resume");
    return resume_cluster_run(ctx, name, quiet);
  }
  if (recovery.auto_recover)
    throw UsageError("--auto-recover is for runs on SSH nodes; run " + run.name + " is local");
  if (run.status == db::RunStatus::kRunning) {
    const pid_t pid = run.run_dir.empty() ? 0 : runs::live_worker_pid(run.run_dir);
    std::fprintf(
        stderr,
        "flotilla: run %s is running (its worker, pid %d, is alive); watch it with flotilla runs attach %s, "
        "or stop it from the command or app that watches it\n",
        run.name.c_str(), static_cast<int>(pid), run.name.c_str());
    return kExitRefused;
  }
  if (!db::transition_allowed(run.status, db::RunStatus::kRunning)) {
    std::fprintf(stderr, "flotilla: run %s is %s and cannot be resumed\n", run.name.c_str(),
                 runs::status_text(run).c_str());
    return kExitRefused;
  }
  if (run.run_dir.empty()) throw UsageError("run " + run.name + " has no run directory to resume from");
  // Its launch may be gone while its ranks still write there (e.g. launch was killed): a second
  // group in the same folder would collide with them.
  if (const auto live = runs::live_group(run.run_dir)) {
    std::fprintf(stderr, "flotilla: run %s %s\n", run.name.c_str(),
                 runs::live_group_text(run.run_dir, *live).c_str());
    return kExitRefused;
  }
  const std::string config_file = runs::stored_config_file(run);
  RunConfig config;
  try {
    config = load_config(config_file, {});
    runs::validate_run_config(config, runs::ranks_of(config));
  } catch (const Error& e) {
    std::fprintf(stderr, "flotilla: %s\n", e.what());
    return static_cast<int>(e.code());
  }
  db::Writer writer(database_path(ctx));
  runs::reprice_for_start(writer, run.id, config);
  runs::TrainCommand command;
  command.worker = runs::find_worker();
  command.config_path = config_file;
  command.ranks = runs::ranks_of(config);
  command.max_restarts = config.run.max_restarts;
  command.resume = true;
  command.sets = {"run.out_dir=" + run.run_dir};
  runs::SpawnOptions spawn;
  spawn.argv = runs::train_argv(command);
  spawn.run_dir = run.run_dir;
  spawn.working_dir = fs::current_path().string();
  spawn.stop_with_parent = true;
  const TerminalSignals signals;
  runs::LocalWatch w;
  try {
    w = runs::start_local_run(&writer, run.id, run.name, spawn, "flotilla runs resume", config.train.steps);
  } catch (const runs::RunFolderBusy& e) {  // a group started there since the check above
    std::fprintf(stderr, "flotilla: %s\n", e.what());
    return kExitRefused;
  }
  if (!quiet) {
    std::printf("run %s (id %lld): %s\n", run.name.c_str(), static_cast<long long>(run.id),
                run.run_dir.c_str());
    std::fflush(stdout);
  }
  return watch(ctx, writer, w, quiet);
}

int attach_local_run(const Context& ctx, const std::string& name, bool quiet) {
  db::Database db = open_store(ctx, "flotilla runs attach");
  const db::Run run = db::get_run(db, name);
  const runs::LocalWatch w =
      runs::attach_local_run(run.id, run.name, run.run_dir, "flotilla runs attach", [&] {
        try {
          return parse_config_toml(run.config_toml, run.name).train.steps;
        } catch (const Error&) {
          return int64_t{0};
        }
      }());
  if (run.status != db::RunStatus::kRunning || w.pid <= 0) {
    std::fprintf(stderr, "flotilla: run %s is %s: no live worker to attach to%s\n", run.name.c_str(),
                 runs::status_text(run).c_str(),
                 run.status == db::RunStatus::kRunning ? "" : " (flotilla runs resume continues it)");
    return kExitRefused;
  }
  const TerminalSignals signals;
  db::Writer writer(database_path(ctx));
  if (!quiet) {
    std::printf("attached to run %s (id %lld), worker pid %d: %s\n", run.name.c_str(),
                static_cast<long long>(run.id), static_cast<int>(w.pid), run.run_dir.c_str());
    std::fflush(stdout);
  }
  return watch(ctx, writer, w, quiet);
}

}  // namespace flotilla::cli
