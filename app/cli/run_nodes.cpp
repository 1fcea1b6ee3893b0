// `flotilla run CONFIG --nodes a,b`: deploy, start every node's ranks detached, tail, stop; and
// `flotilla runs attach RUN`: the same tail and stop for a run whose watching process died.
//
// Decision: this file is only the terminal around ui/runs/noderun_core.h (shared with the app's
// RemoteRun): it prints progress, turns SIGINT/SIGTERM into the core's stop request and formats
// host-key refusals with the trust command. The nodes own the run; the core tails rank 0's
// metrics by committed offset, so `runs attach` continues exactly where the store stopped.
#include "app/cli/run_nodes.h"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "app/cli/node_session.h"
#include "db/costs.h"
#include "db/errors.h"
#include "db/queries.h"
#include "db/run_store.h"
#include "engine/core/error.h"
#include "flotilla/build_info.h"
#include "ui/runs/noderun_core.h"

namespace flotilla::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using ui::noderun::Node;

std::atomic<int> g_stop_signal{0};
void on_stop_signal(int sig) { g_stop_signal = sig; }

// While alive, SIGINT/SIGTERM only set g_stop_signal (acted on by the watch: stop every node).
class StopSignals {
 public:
  StopSignals() {
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &old_int_);
    ::sigaction(SIGTERM, &sa, &old_term_);
  }
  ~StopSignals() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_int_ {}, old_term_{};
};

std::string local_worker() {
  std::error_code ec;
  const fs::path beside = fs::read_symlink("/proc/self/exe", ec).parent_path() / "flotilla-worker";
  if (!ec && fs::exists(beside)) return beside.string();
  throw db::DbError(db::DbErrorKind::kNotFound, "flotilla-worker was not found next to flotilla (" +
                                                    beside.string() + "): reinstall Flotilla");
}

void print_step(const db::IngestEvent& e, int64_t total, Clock::time_point& last) {
  const auto now = Clock::now();
  if (e.type == "step") {
    if (now - last < std::chrono::seconds(1) && e.step != total) return;
    last = now;
    std::printf("step %lld/%lld  loss %.4f  %s tok/s\n", static_cast<long long>(e.step),
                static_cast<long long>(total), e.loss, format_number(e.tokens_per_s).c_str());
  } else if (e.type == "eval") {
    std::printf("eval at step %lld  val_loss %.4f\n", static_cast<long long>(e.step), e.val_loss);
  } else if (e.type == "checkpoint") {
    std::printf("checkpoint at step %lld\n", static_cast<long long>(e.step));
  } else if (e.type == "event" && (e.level == "warning" || e.level == "error")) {
    std::printf("%s: %s\n", e.level.c_str(), e.message.c_str());
  } else {
    return;
  }
  std::fflush(stdout);
}

void note_stderr(const std::string& text) { std::fprintf(stderr, "flotilla: %s\n", text.c_str()); }

bool connect_all(const Context& ctx, std::vector<Node>& nodes) {
  return ui::noderun::connectNodes(
      nodes, [&](const db::SshNode& rec) { return node_session_options(ctx, rec); },
      [](const std::string& name, const remote::HostKeyError& e) {
        std::fprintf(stderr, "flotilla: %s\n", host_key_message(name, e).c_str());
      });
}

// Watches until node 0's worker exits (the caller holds a StopSignals), recovering from
// preemptions as `recovery` allows, and prints the summary.
int watch(const Context& ctx, std::vector<Node>& nodes, const ui::noderun::Watch& w, bool quiet,
          const ui::noderun::Recovery& recovery = {}) {
  Clock::time_point last_print{};
  ui::noderun::WatchHooks hooks;
  hooks.note = note_stderr;
  if (!quiet) hooks.onRecord = [&](const db::IngestEvent& e) { print_step(e, w.totalSteps, last_print); };
  hooks.stopRequested = [] { return g_stop_signal.load() != 0; };
  const std::string path = database_path(ctx);
  const int exit_code = ui::noderun::superviseRun(path, nodes, w, hooks, recovery);
  if (exit_code == static_cast<int>(ExitCode::kComm)) return exit_code;
  if (!quiet) {
    db::Database reader(path);
    const db::RunSummary s = db::run_summary(reader, w.runId);
    std::printf("run %s %s: %lld steps, final loss %s, %s, $%.4f\n", w.name.c_str(), s.status.c_str(),
                static_cast<long long>(s.steps), s.final_loss ? format_number(*s.final_loss).c_str() : "-",
                format_duration(s.wall_s).c_str(), db::run_cost_usd(reader, w.runId));
  }
  return exit_code;
}

}  // namespace

std::vector<std::string> parse_node_list(const std::string& text, const std::string& option) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    const std::string name = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (name.empty())
      throw UsageError(option + " needs node names separated by commas, e.g. " + option + " a,b");
    for (const auto& seen : out)
      if (seen == name) throw UsageError(option + " names node '" + name + "' twice");
    out.push_back(name);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

int run_on_nodes(const Context& ctx, const NodesRunRequest& req) {
  db::Database db = open_store(ctx);
  std::vector<Node> nodes;
  for (const auto& name : req.nodes) nodes.push_back(Node{db::get_ssh_node(db, name), nullptr, ""});
  const int m = static_cast<int>(nodes.size());
  int n = 0;
  try {
    n = ui::noderun::ranksPerNode(req.config, m, req.nproc_per_node);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  // Connect everything first: an untrusted host refuses the run before anything starts (S3).
  if (!connect_all(ctx, nodes)) return kExitRefused;

  ui::noderun::StartRequest start;
  start.config = req.config;
  start.name = req.name;
  start.budgetUsd = req.budget_usd;
  start.nprocPerNode = n;
  start.masterPort = req.master_port;
  start.noBind = req.no_bind;
  start.workerPath = local_worker();
  start.version = FLOTILLA_VERSION_STRING;
  const auto progress = [&](const std::string& line) {
    if (!req.quiet) std::printf("%s\n", line.c_str());
  };
  const ui::noderun::Watch w = ui::noderun::startOnNodes(db, nodes, start, progress);
  if (!req.quiet) {
    std::printf("run %s (id %lld): %d node(s) x %d rank(s), remote dir ~/.flotilla/runs/%s\n", req.name.c_str(),
                static_cast<long long>(w.runId), m, n, w.rid.c_str());
    std::fflush(stdout);
  }
  ui::noderun::Recovery recovery;
  recovery.enabled = req.auto_recover;
  recovery.maxRecoveries = req.max_recoveries;
  recovery.settleSeconds = req.recover_after_s;
  for (const auto& name : req.spares) recovery.spares.push_back(db::get_ssh_node(db, name));
  recovery.options = [&](const db::SshNode& rec) { return node_session_options(ctx, rec); };
  recovery.workerPath = start.workerPath;
  recovery.version = start.version;
  recovery.noBind = req.no_bind;
  const StopSignals signals;
  return watch(ctx, nodes, w, req.quiet, recovery);
}

int attach_nodes_run(const Context& ctx, const std::string& run_name, bool quiet) {
  const StopSignals signals;  // from here on, Ctrl-C stops the run on every node once attached
  db::Database db = open_store(ctx);
  const db::Run run = db::get_run(db, run_name);
  std::vector<Node> nodes;
  std::string rid;
  if (const std::string why = ui::noderun::attachTarget(db, run, nodes, rid); !why.empty()) {
    note_stderr(why);
    return kExitRefused;
  }
  if (!connect_all(ctx, nodes)) return kExitRefused;
  std::string refusal;
  bool running = false;
  const ui::noderun::Watch w = ui::noderun::attachWatch(run, nodes, rid, "flotilla runs attach", refusal, running);
  if (!refusal.empty()) {
    note_stderr(refusal);
    return kExitRefused;
  }
  if (!quiet) {
    std::printf("attached to run %s (id %lld) on %zu node(s), remote dir ~/.flotilla/runs/%s, %s\n",
                run.name.c_str(), static_cast<long long>(run.id), nodes.size(), rid.c_str(),
                running ? "running" : "already exited");
    std::fflush(stdout);
  }
  return watch(ctx, nodes, w, quiet);
}

}  // namespace flotilla::cli
