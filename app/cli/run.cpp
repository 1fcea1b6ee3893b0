// `flotilla run CONFIG.toml` and `flotilla runs resume RUN`: start the local worker as a child,
// ingest its metrics live into the store, print progress, return the worker's exit status.
//
// Decision: the child's stdout (the metrics protocol) is read continuously on this thread and
// handed to the Ingestor, which only queues rows for the writer thread; a slow or full database
// therefore never stalls the pipe, so it never stalls training (RELIABILITY.md D3). Rows the writer
// had to drop are recovered at the end from the run's metrics.jsonl by a file ingest (same rows,
// replaced, never doubled). The child runs in its own process group and gets SIGTERM if we die;
// SIGINT/SIGTERM sent to us are forwarded once, so the worker checkpoints and exits 10.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "app/cli/cli.h"
#include "app/cli/run_nodes.h"
#include "db/costs.h"
#include "db/errors.h"
#include "db/ingest.h"
#include "db/queries.h"
#include "db/run_store.h"
#include "db/sql.h"
#include "db/writer.h"
#include "engine/config/config_io.h"
#include "engine/config/config_validate.h"
#include "engine/core/error.h"
#include "ui/runs/noderun_core.h"

namespace flotilla::cli {
namespace {

namespace fs = std::filesystem;

std::atomic<pid_t> g_child{0};
std::atomic<int> g_signal{0};

void forward_signal(int sig) {
  if (g_signal.exchange(sig) == 0) {
    const pid_t child = g_child.load();
    if (child > 0) ::kill(child, SIGTERM);
  }
}

std::string worker_path() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  const fs::path beside = self.parent_path() / "flotilla-worker";
  if (!ec && fs::exists(beside)) return beside.string();
  throw db::DbError(db::DbErrorKind::kNotFound,
                    "flotilla-worker was not found next to flotilla (" + beside.string() +
                        "): reinstall Flotilla, or build the flotilla-worker target");
}

struct Supervised {
  int exit_code = 1;
  bool user_stop = false;
  bool budget_stop = false;
};

pid_t spawn_worker(const std::vector<std::string>& argv, int* out_fd) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw db::DbError(db::DbErrorKind::kOpen, std::string("cannot create a pipe: ") + std::strerror(errno));
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);  // terminal Ctrl-C reaches only us; we forward it once
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) _exit(127);
    ::dup2(fds[1], 1);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    std::fprintf(stderr, "flotilla: cannot start %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  ::close(fds[1]);
  if (pid < 0) {
    ::close(fds[0]);
    throw db::DbError(db::DbErrorKind::kOpen,
                      std::string("cannot start the worker: ") + std::strerror(errno));
  }
  *out_fd = fds[0];
  return pid;
}

void print_progress(const db::IngestEvent& e, int64_t total_steps, bool force) {
  static auto last = std::chrono::steady_clock::time_point{};
  const auto now = std::chrono::steady_clock::now();
  if (e.type == "step") {
    if (!force && now - last < std::chrono::seconds(1) && e.step != total_steps) return;
    last = now;
    std::printf("step %lld/%lld  loss %.4f  %s tok/s  mfu %.1f%%\n", static_cast<long long>(e.step),
                static_cast<long long>(total_steps), e.loss, format_number(e.tokens_per_s).c_str(),
                e.mfu * 100);
  } else if (e.type == "eval") {
    std::printf("eval at step %lld  val_loss %.4f\n", static_cast<long long>(e.step), e.val_loss);
  } else if (e.type == "checkpoint") {
    std::printf("checkpoint at step %lld  %s\n", static_cast<long long>(e.step), e.message.c_str());
  } else if (e.type == "event" && (e.level == "warning" || e.level == "error")) {
    std::printf("%s: %s\n", e.level.c_str(), e.message.c_str());
  } else if (e.type == "run_start") {
    std::printf("worker %s\n", e.message.c_str());
  } else {
    return;
  }
  std::fflush(stdout);
}

// Runs the worker for `run_id`, ingesting live; sets the final status; returns the exit status.
int supervise(const Context& ctx, int64_t run_id, const std::vector<std::string>& argv, int64_t total_steps,
              bool quiet) {
  const std::string path = database_path(ctx);
  db::Writer writer(path);
  db::Database reader(path);
  const db::Run run = db::get_run(reader, run_id);

  struct sigaction sa {};
  sa.sa_handler = forward_signal;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_int {
  }, old_term{};
  ::sigaction(SIGINT, &sa, &old_int);
  ::sigaction(SIGTERM, &sa, &old_term);

  int fd = -1;
  const pid_t pid = spawn_worker(argv, &fd);
  g_child = pid;
  writer.run([&](db::Database& db) {
    db::set_status(db, run_id, db::RunStatus::kRunning, 0, "flotilla run: worker pid " + std::to_string(pid));
  });
  if (!quiet) {
    std::printf("run %s (id %lld): %s\n", run.name.c_str(), static_cast<long long>(run_id),
                run.run_dir.c_str());
    std::fflush(stdout);
  }

  db::Ingestor ingestor(writer, run_id);
  if (!quiet) ingestor.on_record = [&](const db::IngestEvent& e) { print_progress(e, total_steps, false); };
  Supervised result;
  auto last_budget = std::chrono::steady_clock::now();
  bool budget_warned = false;
  char buf[65536];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, 500);
    if (ready > 0) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n == 0) break;
      if (n > 0)
        ingestor.feed(std::string_view(buf, static_cast<size_t>(n)));
      else if (errno != EINTR && errno != EAGAIN)
        break;
    }
    ingestor.submit_pending();
    const auto now = std::chrono::steady_clock::now();
    if (now - last_budget >= std::chrono::seconds(2) && run.budget_usd) {
      last_budget = now;
      const db::BudgetStatus b = db::budget_status(reader, run_id);
      if (b.action == db::BudgetAction::kStop && !result.budget_stop) {
        result.budget_stop = true;
        std::fprintf(stderr, "flotilla: %s\n", b.message.c_str());
        ::kill(pid, SIGTERM);
      } else if (b.action == db::BudgetAction::kWarn && !budget_warned) {
        budget_warned = true;
        std::fprintf(stderr, "flotilla: %s\n", b.message.c_str());
      }
    }
  }
  ::close(fd);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_child = 0;
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  result.user_stop = g_signal.load() != 0;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  ingestor.finish();

  bool stored_all = writer.flush();
  if (!stored_all && !run.run_dir.empty()) {  // recover dropped rows from the run's own file
    try {
      db::FileIngestor file(writer, run_id, run.run_dir + "/metrics.jsonl", "recovery");
      file.poll();
      stored_all = writer.flush();
    } catch (const db::DbError& e) {
      std::fprintf(stderr, "flotilla: %s\n", e.what());
    }
  }

  db::RunStatus final_status = db::RunStatus::kFailed;
  std::string reason = "worker exit " + std::to_string(result.exit_code);
  if (result.exit_code == 0) {
    final_status = db::RunStatus::kCompleted;
  } else if (result.exit_code == static_cast<int>(ExitCode::kPreempted)) {
    final_status =
        (result.user_stop || result.budget_stop) ? db::RunStatus::kStopped : db::RunStatus::kPreempted;
    if (result.budget_stop) reason += " (budget reached)";
    if (result.user_stop) reason += " (stopped by signal)";
  }
  try {
    writer.run([&](db::Database& db) {
      const db::Run now = db::get_run(db, run_id);
      const db::RunStatus to = db::transition_allowed(now.status, final_status) ? final_status : now.status;
      db::set_status(db, run_id, to, 0, reason, result.exit_code);
    });
    writer.flush();
  } catch (const db::DbError& e) {
    std::fprintf(stderr, "flotilla: recording the end of run %s failed: %s\n", run.name.c_str(), e.what());
  }
  const db::WriterStats ws = writer.stats();
  const db::IngestStats& is = ingestor.stats();
  if (!quiet) {
    const db::RunSummary s = db::run_summary(reader, run_id);
    std::printf("run %s %s: %lld steps, final loss %s, %s, %llu metric rows stored\n", run.name.c_str(),
                s.status.c_str(), static_cast<long long>(s.steps),
                s.final_loss ? format_number(*s.final_loss).c_str() : "-", format_duration(s.wall_s).c_str(),
                static_cast<unsigned long long>(ws.committed_rows));
  }
  if (is.bad_lines > 0)
    std::fprintf(stderr, "flotilla: skipped %llu malformed metrics line(s), e.g. %s\n",
                 static_cast<unsigned long long>(is.bad_lines), is.last_bad.c_str());
  if (!stored_all)
    std::fprintf(stderr, "flotilla: the run database could not store %llu metric rows: %s\n",
                 static_cast<unsigned long long>(ws.dropped_rows), ws.last_error.c_str());
  return result.exit_code;
}

int64_t nproc_of(const RunConfig& c) {
  const int64_t n = static_cast<int64_t>(c.parallel.dp) * c.parallel.tp * c.parallel.pp;
  return n > 0 ? n : 1;
}

std::vector<std::string> worker_argv(int64_t nproc, std::vector<std::string> train_args) {
  std::vector<std::string> argv = {worker_path()};
  if (nproc > 1) {
    for (const char* a : {"launch", "--nproc-per-node"}) argv.push_back(a);
    argv.push_back(std::to_string(nproc));
    for (const char* a : {"--master-port", "0", "--"}) argv.push_back(a);
  }
  argv.push_back("train");
  argv.insert(argv.end(), train_args.begin(), train_args.end());
  return argv;
}

}  // namespace

int cmd_run(const Context& ctx) {
  ArgReader args(ctx.args, "run");
  if (args.flag("--help")) {
    std::printf(
        "Usage: flotilla run CONFIG.toml [--name NAME] [--set KEY=VALUE]... [--budget USD] [--quiet]\n"
        "                    [--nodes A,B,... [--nproc-per-node N] [--master-port P] [--no-bind]\n"
        "                     [--auto-recover [--spare C,D,...] [--max-recoveries K] [--recover-after S]\n"
        "                                     [--mirror-checkpoints]]]\n\n"
        "Starts the training worker on this machine (flotilla-worker launch when parallel.dp*tp*pp > 1),\n"
        "stores its metrics in the run database as they arrive, prints progress, and exits with the\n"
        "worker's exit status. Ctrl-C stops the worker at the next step with a checkpoint (exit 10);\n"
        "flotilla runs resume NAME continues it.\n\n"
        "With --nodes, the run spans those SSH nodes (flotilla nodes list), N ranks each (default\n"
        "parallel.dp*tp*pp / nodes): the worker is deployed to each node, started detached there, and rank\n"
        "0's metrics are tailed into the store; a dropped connection reconnects and re-attaches, Ctrl-C\n"
        "stops every node. The first node is the master.\n\n"
        "With --auto-recover, a preempted run (a node's worker stopped by SIGTERM: exit 10) is started\n"
        "again by itself, after S seconds (default 20), from its newest checkpoint: nodes that no longer\n"
        "answer are replaced by the --spare nodes, or their ranks go to the nodes that remain (the\n"
        "number of ranks stays dp*tp*pp). At most K recoveries (default 3). The master must remain,\n"
        "unless --mirror-checkpoints copies each checkpoint to the workspace as it is written: then a\n"
        "lost master is replaced too and the newest copy is uploaded to the new one.\n");
    return kExitOk;
  }
  std::optional<std::string> name = args.value("--name");
  std::vector<std::string> sets = args.values("--set");
  const std::optional<double> budget = args.number("--budget");
  const bool quiet = args.flag("--quiet");
  const std::optional<std::string> node_list = args.value("--nodes");
  const std::optional<double> nproc_opt = args.number("--nproc-per-node");
  const std::optional<double> master_port = args.number("--master-port");
  const bool no_bind = args.flag("--no-bind");
  const RecoveryRequest recovery = read_recovery_options(args);
  if (!node_list && (nproc_opt || master_port || no_bind || recovery.auto_recover))
    throw UsageError("--nproc-per-node, --master-port, --no-bind and --auto-recover go with --nodes");
  const auto pos = args.positionals();
  if (pos.size() != 1) throw UsageError("run needs exactly one CONFIG.toml (flotilla run --help)");
  const std::string config_path = fs::absolute(pos[0]).string();

  RunConfig config;
  try {
    config = load_config(config_path, sets);
  } catch (const Error& e) {
    std::fprintf(stderr, "flotilla: %s\n", e.what());
    return static_cast<int>(e.code());
  }
  db::Database db = open_store(ctx);
  if (name) {
    if (db::find_run(db, *name))
      throw UsageError("a run named '" + *name +
                       "' already exists: choose another --name, or continue it with "
                       "flotilla runs resume " +
                       *name);
  } else {
    name = db::unique_run_name(db, config.run.name);
    if (*name != config.run.name)
      std::printf("a run named %s exists; this run is %s\n", config.run.name.c_str(), name->c_str());
  }
  sets.push_back("run.name=" + *name);
  config.run.name = *name;
  if (node_list) {
    NodesRunRequest req;
    req.nodes = parse_node_list(*node_list);
    req.config = config;
    req.name = *name;
    req.budget_usd = budget;
    if (nproc_opt) {
      if (*nproc_opt < 1 || *nproc_opt > 1024 || *nproc_opt != static_cast<double>(static_cast<int>(*nproc_opt)))
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
  const std::string run_dir = fs::absolute(resolved_out_dir(config)).lexically_normal().string();
  {
    db::Stmt same_dir(db, "SELECT name FROM runs WHERE run_dir = ?1");
    same_dir.bind(1, run_dir);
    if (same_dir.step())
      throw UsageError("run directory " + run_dir + " belongs to run '" + same_dir.text(0) +
                       "': continue it with flotilla runs resume " + same_dir.text(0) +
                       ", or set another run.out_dir");
  }
  config.run.out_dir = run_dir;
  sets.push_back("run.out_dir=" + run_dir);

  const int64_t nproc = nproc_of(config);
  db::NewRun nr;
  nr.name = *name;
  nr.config_toml = config_to_toml(config);
  nr.config_json = config_to_json(config, -1);
  nr.run_dir = run_dir;
  nr.budget_usd = budget;
  const int64_t run_id = db::create_run(db, nr);
  const int64_t node = db::ensure_node(db, "local", "local");
  db::attach_node(db, run_id, node, nproc);

  std::vector<std::string> train = {"--config", config_path, "--quiet"};
  for (const auto& s : sets) {
    train.push_back("--set");
    train.push_back(s);
  }
  return supervise(ctx, run_id, worker_argv(nproc, train), config.train.steps, quiet);
}

int resume_run(const Context& ctx, const std::string& name, const RecoveryRequest& recovery, bool quiet) {
  db::Database db = open_store(ctx);
  const db::Run run = db::get_run(db, name);
  if (ui::noderun::isNodeRunDir(run.run_dir)) return resume_nodes_run(ctx, name, recovery, quiet);
  if (recovery.auto_recover) throw UsageError("--auto-recover is for runs on SSH nodes; run " + run.name + " is local");
  if (!db::transition_allowed(run.status, db::RunStatus::kRunning) || run.status == db::RunStatus::kRunning) {
    std::fprintf(stderr, "flotilla: run %s is %s and cannot be resumed%s\n", run.name.c_str(),
                 db::to_string(run.status),
                 run.status == db::RunStatus::kRunning ? " (it is running already)" : "");
    return kExitRefused;
  }
  if (run.run_dir.empty()) throw UsageError("run " + run.name + " has no run directory to resume from");
  std::string config_file = run.run_dir + "/config.toml";
  if (!fs::exists(config_file)) {  // the worker never started: use the stored config
    fs::create_directories(run.run_dir);
    config_file = run.run_dir + "/flotilla-config.toml";
    std::ofstream(config_file) << run.config_toml;
  }
  RunConfig config;
  try {
    config = load_config(config_file, {});
  } catch (const Error& e) {
    std::fprintf(stderr, "flotilla: %s\n", e.what());
    return static_cast<int>(e.code());
  }
  const std::vector<std::string> train = {
      "--config", config_file, "--resume", "auto", "--quiet", "--set", "run.out_dir=" + run.run_dir};
  return supervise(ctx, run.id, worker_argv(nproc_of(config), train), config.train.steps, quiet);
}

}  // namespace flotilla::cli
