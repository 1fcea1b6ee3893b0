// `flotilla run CONFIG.toml [--nodes A,B | --cluster NAME]`: a new run, wherever it executes, through
// the runs service (runs/service.h): the terminal around its lifecycle.
//
// Decision: this file only parses, prints and turns signals into requests. Creating, naming,
// pricing and storing the run, starting it where it is placed (this machine, SSH nodes, a Slurm
// job), storing its metrics by byte offset, the budget, and how the run ends are the runs layer's,
// exactly as for a run started from the app; the flags only build a runs::Placement. SIGINT,
// SIGTERM and SIGHUP (the terminal closed) are each a stop request: the worker checkpoints and
// exits 10 and the run is recorded stopped; if this process is killed outright, a local worker gets
// SIGTERM from its parent-death signal and stops the same way (a run elsewhere keeps going:
// `flotilla runs attach` picks it up), and the next command settles the run from its files.
#include <cstdio>
#include <filesystem>

#include "app/cli/cli.h"
#include "app/cli/run_args.h"
#include "app/cli/terminal.h"
#include "db/queries.h"
#include "db/run_store.h"
#include "engine/config/config_io.h"
#include "engine/core/error.h"
#include "runs/run_setup.h"
#include "runs/service.h"

namespace flotilla::cli {
namespace {

namespace fs = std::filesystem;

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
        "                    [--quiet] [--no-bind] [--layout dp=N,tp=N,pp=N,zero=N]\n"
        "                    [--nodes A,B,... [--nproc-per-node N] [--master-port P]\n"
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
        "2).\n"
        "--layout overrides parallel.dp/tp/pp/zero (dp*tp*pp ranks); --no-bind pins no rank to cores.\n\n"
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
  const std::optional<std::string> name = args.value("--name");
  std::vector<std::string> sets = args.values("--set");
  const std::optional<double> budget = args.number("--budget");
  const int max_restarts = read_restarts(args);
  const bool quiet = args.flag("--quiet");
  const PlaceArgs place = read_place(args);
  const runs::Layout layout = read_layout(args);
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

  runs::RunRequest req;
  try {
    req.config = load_config(config_path, sets);
    if (max_restarts >= 0) req.max_restarts = max_restarts;
    if (!name) runs::check_new_run_name(req.config.run.name);  // run.name from the config
  } catch (const Error& e) {
    std::fprintf(stderr, "flotilla: %s\n", e.what());
    return static_cast<int>(e.code());
  }
  const db::Database db = open_store(ctx, "flotilla run");
  if (name && db::find_run(db, *name))
    throw UsageError("a run named '" + *name +
                     "' already exists: choose another --name, or continue it with " +
                     "flotilla runs resume " + *name);
  req.name = name.value_or("");
  req.explicit_name = name.has_value();
  req.where = place.where.value_or(runs::Placement::here());
  req.layout = layout;
  req.budget_usd = budget;

  runs::ServiceOptions options = service_options(ctx, "flotilla run");
  options.no_bind = place.no_bind;
  runs::RunService service(options);
  const auto progress = [quiet](const std::string& line) {
    if (!quiet) std::printf("%s\n", line.c_str());
  };
  const StopSignals signals;  // before the start: a Ctrl-C from now on stops the run cleanly
  req.cancelled = [] { return StopSignals::requested(); };  // also while nodes fetch a model by name
  std::unique_ptr<runs::ActiveRun> run;
  try {
    run = service.start(req, progress);
  } catch (const runs::Refusal& e) {  // e.g. an untrusted host: nothing was started
    note_stderr(e.what());
    return kExitRefused;
  }
  if (!name && run->name() != req.config.run.name)
    std::printf("a run named %s exists; this run is %s\n", req.config.run.name.c_str(), run->name().c_str());
  if (!quiet) {
    std::printf("%s\n", run->headline().c_str());
    // The price it was started with, as stored (every place prices a run the same way).
    const db::Run r = db::get_run(db, run->id());
    if (r.usd_per_hour && *r.usd_per_hour > 0)
      std::printf("price $%.4g/h (%s)%s\n", *r.usd_per_hour, r.price_source.c_str(),
                  r.budget_usd ? ("; budget $" + format_number(*r.budget_usd)).c_str() : "");
    std::fflush(stdout);
  }
  return watch_run(ctx, *run, quiet);
}

}  // namespace flotilla::cli
