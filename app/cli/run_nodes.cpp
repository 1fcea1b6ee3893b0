// `flotilla run CONFIG --nodes a,b`: deploy, start every node's ranks detached, tail, stop; and
// `flotilla runs attach RUN`: the same tail and stop for a run whose watching process died.
//
// Decision: this file is only the terminal around runs/node_run.h (shared with the app's
// RemoteRun): it prints progress, turns SIGINT/SIGTERM into the core's stop request and formats
// host-key refusals with the trust command. The nodes own the run; the core tails rank 0's
// metrics by committed offset, so `runs attach` continues exactly where the store stopped.
#include "app/cli/run_nodes.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "app/cli/node_session.h"
#include "db/costs.h"
#include "db/errors.h"
#include "db/queries.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "db/writer.h"
#include "engine/core/error.h"
#include "flotilla/build_info.h"
#include "remote/remote_run.h"
#include "remote/session.h"
#include "runs/node_run.h"
#include "runs/run_speed.h"
#include "runs/worker_command.h"

namespace flotilla::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using runs::Node;

std::atomic<int> g_stop_signal{0};
void on_stop_signal(int sig) { g_stop_signal = sig; }

// While alive, SIGINT/SIGTERM/SIGHUP only set g_stop_signal (acted on by the watch: stop every node).
class StopSignals {
 public:
  StopSignals() {
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGINT, &sa, &old_int_);
    ::sigaction(SIGTERM, &sa, &old_term_);
    ::sigaction(SIGHUP, &sa, &old_hup_);  // the terminal closed: stop the nodes, as Ctrl-C would
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    ::sigaction(SIGPIPE, &ign, &old_pipe_);
  }
  ~StopSignals() {
    ::sigaction(SIGINT, &old_int_, nullptr);
    ::sigaction(SIGTERM, &old_term_, nullptr);
    ::sigaction(SIGHUP, &old_hup_, nullptr);
    ::sigaction(SIGPIPE, &old_pipe_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_int_ {
  }, old_term_{}, old_hup_{}, old_pipe_{};
};

void print_step(const MetricsRecord& e, int64_t total, Clock::time_point& last) {
  const auto now = Clock::now();
  if (e.type == MetricsRecordType::kStep) {
    if (e.rank != 0) return;
    if (now - last < std::chrono::seconds(1) && e.step().step != total) return;
    last = now;
    std::printf("step %lld/%lld  loss %.4f  %s tok/s\n", static_cast<long long>(e.step().step),
                static_cast<long long>(total), static_cast<double>(e.step().loss),
                format_number(e.step().tokens_per_s).c_str());
  } else if (e.type == MetricsRecordType::kEval) {
    std::printf("eval at step %lld  val_loss %.4f\n", static_cast<long long>(e.eval().step),
                static_cast<double>(e.eval().val_loss));
  } else if (e.type == MetricsRecordType::kCheckpoint) {
    std::printf("checkpoint at step %lld\n", static_cast<long long>(e.checkpoint().step));
  } else if (e.type == MetricsRecordType::kEvent &&
             (e.event().level == "warning" || e.event().level == "error")) {
    std::printf("%s: %s\n", e.event().level.c_str(), e.event().message.c_str());
  } else {
    return;
  }
  std::fflush(stdout);
}

void note_stderr(const std::string& text) { std::fprintf(stderr, "flotilla: %s\n", text.c_str()); }

bool connect_all(const Context& ctx, std::vector<Node>& nodes) {
  return runs::connect_nodes(
      nodes, [&](const db::SshNode& rec) { return node_session_options(ctx, rec); },
      [](const std::string& name, const remote::HostKeyError& e) {
        std::fprintf(stderr, "flotilla: %s\n", host_key_message(name, e).c_str());
      });
}

// Watches until node 0's worker exits (the caller holds a StopSignals), recovering from
// preemptions as `recovery` allows, and prints the summary.
int watch(const Context& ctx, std::vector<Node>& nodes, const runs::Watch& w, bool quiet,
          const runs::Recovery& recovery = {}) {
  Clock::time_point last_print{};
  runs::WatchHooks hooks;
  hooks.note = note_stderr;
  if (!quiet) hooks.on_record = [&](const MetricsRecord& e) { print_step(e, w.total_steps, last_print); };
  hooks.stop_requested = [] { return g_stop_signal.load() != 0; };
  const std::string path = database_path(ctx);
  db::Writer writer(path);
  const int exit_code = runs::supervise_node_run(writer, nodes, w, hooks, recovery);
  if (exit_code == static_cast<int>(ExitCode::kComm)) return exit_code;
  if (!quiet) {
    db::Database reader(path);
    const db::RunSummary s = runs::run_summary(reader, w.run_id);
    std::printf("run %s %s: %lld steps, final loss %s, %s, $%.4f\n", w.name.c_str(), s.status.c_str(),
                static_cast<long long>(s.steps), s.final_loss ? format_number(*s.final_loss).c_str() : "-",
                format_duration(s.wall_s).c_str(), db::run_cost_usd(reader, w.run_id));
  }
  return exit_code;
}

// Where the checkpoints of run `name` are mirrored (--mirror-checkpoints) and fetched by default.
std::string checkpoints_dir_of(const Context& ctx, const std::string& name) {
  return (fs::path(database_path(ctx)).parent_path() / "checkpoints" / name).string();
}

// `mirror_dir`: where the run's checkpoints are mirrored with --mirror-checkpoints.
runs::Recovery make_recovery(const Context& ctx, db::Database& db, const RecoveryRequest& req,
                             const std::string& mirror_dir) {
  runs::Recovery recovery;
  recovery.enabled = req.auto_recover;
  recovery.max_recoveries = req.max_recoveries;
  recovery.settle_seconds = req.recover_after_s;
  for (const auto& name : req.spares) recovery.spares.push_back(db::get_ssh_node(db, name));
  recovery.options = [&ctx](const db::SshNode& rec) { return node_session_options(ctx, rec); };
  recovery.worker_path = runs::find_worker();
  recovery.version = FLOTILLA_VERSION_STRING;
  recovery.no_bind = req.no_bind;
  if (req.mirror) recovery.mirror_dir = mirror_dir;
  return recovery;
}

}  // namespace

RecoveryRequest read_recovery_options(ArgReader& args) {
  RecoveryRequest r;
  r.auto_recover = args.flag("--auto-recover");
  const std::optional<std::string> spare_list = args.value("--spare");
  const std::optional<double> max_recoveries = args.number("--max-recoveries");
  const std::optional<double> recover_after = args.number("--recover-after");
  r.mirror = args.flag("--mirror-checkpoints");
  if (!r.auto_recover && (spare_list || max_recoveries || recover_after || r.mirror))
    throw UsageError(
        "--spare, --max-recoveries, --recover-after and --mirror-checkpoints go with --auto-recover");
  if (max_recoveries) {
    if (*max_recoveries < 1 || *max_recoveries > 100 ||
        *max_recoveries != static_cast<double>(static_cast<int>(*max_recoveries)))
      throw UsageError("--max-recoveries needs a whole number from 1 to 100");
    r.max_recoveries = static_cast<int>(*max_recoveries);
  }
  if (recover_after) {
    if (!(*recover_after >= 0 && *recover_after <= 3600))
      throw UsageError("--recover-after needs seconds from 0 to 3600");
    r.recover_after_s = *recover_after;
  }
  if (spare_list) r.spares = parse_node_list(*spare_list, "--spare");
  return r;
}

namespace {

// The master node of a run on nodes, connected, and its remote run id; nullopt (after printing
// why) when the run is not on nodes or the master is not trusted.
struct Master {
  Node node;
  std::string rid;
};
std::optional<Master> connect_master(const Context& ctx, db::Database& db, const db::Run& run) {
  std::vector<Node> nodes;
  std::string rid;
  if (const std::string why = runs::attach_target(db, run, nodes, rid, true);
      !why.empty() && why.find("already ended") == std::string::npos) {
    note_stderr(why);
    return std::nullopt;
  }
  if (nodes.empty()) {  // completed: attach_target stops before listing the nodes
    const auto colon = run.run_dir.find(':');
    nodes.push_back(Node{db::get_ssh_node(db, run.run_dir.substr(0, colon)), nullptr, ""});
    rid = run.run_dir.substr(run.run_dir.rfind('/') + 1);
  }
  std::vector<Node> master;
  master.push_back(std::move(nodes[0]));
  if (!connect_all(ctx, master)) return std::nullopt;
  return Master{std::move(master[0]), rid};
}

}  // namespace

int list_run_checkpoints(const Context& ctx, const std::string& run_name, bool as_json) {
  db::Database db = open_store(ctx);
  const db::Run run = db::get_run(db, run_name);
  nlohmann::json out = nlohmann::json::array();
  int purged = 0;
  if (runs::is_node_run_dir(run.run_dir)) {
    std::optional<Master> m = connect_master(ctx, db, run);
    if (!m) return kExitRefused;
    for (const auto& c : remote::list_remote_checkpoints(*m->node.session, m->rid))
      out.push_back({{"step", c.step},
                     {"where", m->node.rec.name + ":" + run.run_dir.substr(run.run_dir.find(':') + 1) +
                                   "/checkpoints/" + c.name}});
  } else {
    // Only what is still on disk: a checkpoint the worker has purged since (checkpoint.keep_last)
    // is not offered, though the store remembers it was written.
    for (const auto& c : db::list_checkpoints(db, run.id)) {
      std::error_code ec;
      if (!fs::exists(fs::path(c.dir) / "MANIFEST", ec)) {
        ++purged;
        continue;
      }
      out.push_back({{"step", c.step}, {"where", c.dir}, {"bytes", c.bytes}, {"reason", c.reason}});
    }
  }
  if (as_json) {
    std::printf("%s\n", out.dump(2).c_str());
  } else if (out.empty()) {
    std::printf(
        "run %s has no checkpoint%s\n", run.name.c_str(),
        purged ? (" on disk (" + std::to_string(purged) + " written earlier were purged)").c_str() : "");
  } else {
    for (const auto& c : out)
      std::printf("step %8lld  %s\n", static_cast<long long>(c["step"].get<int64_t>()),
                  c["where"].get<std::string>().c_str());
  }
  return kExitOk;
}

int fetch_run_checkpoint(const Context& ctx, const std::string& run_name, std::optional<int64_t> step,
                         const std::string& out_dir) {
  db::Database db = open_store(ctx);
  const db::Run run = db::get_run(db, run_name);
  if (!runs::is_node_run_dir(run.run_dir)) {
    note_stderr("run " + run.name + " ran on this machine: its checkpoints are already in " + run.run_dir +
                "/checkpoints (flotilla runs checkpoints " + run.name + ")");
    return kExitRefused;
  }
  std::optional<Master> m = connect_master(ctx, db, run);
  if (!m) return kExitRefused;
  const auto all = remote::list_remote_checkpoints(*m->node.session, m->rid);
  if (all.empty()) {
    note_stderr("run " + run.name + " has no committed checkpoint on node " + m->node.rec.name);
    return kExitRefused;
  }
  int64_t want = all.back().step;
  if (step) {
    const bool found = std::any_of(all.begin(), all.end(), [&](const auto& c) { return c.step == *step; });
    if (!found) {
      std::string steps;
      for (const auto& c : all) steps += (steps.empty() ? "" : ", ") + std::to_string(c.step);
      throw UsageError("run " + run.name + " has no checkpoint at step " + std::to_string(*step) +
                       " (it has " + steps + ")");
    }
    want = *step;
  }
  const std::string dir =
      out_dir.empty() ? checkpoints_dir_of(ctx, run.name) : fs::absolute(out_dir).string();
  fs::create_directories(dir);
  const std::string local = remote::fetch_remote_checkpoint(*m->node.session, m->rid, want, dir);
  std::printf("%s\n", local.c_str());
  return kExitOk;
}

int checkpoint_nodes_run(const Context& ctx, const std::string& run_name) {
  db::Database db = open_store(ctx);
  const db::Run run = db::get_run(db, run_name);
  std::optional<Master> m = connect_master(ctx, db, run);
  if (!m) return kExitRefused;
  if (!remote::request_remote_checkpoint(*m->node.session, m->rid)) {
    note_stderr("run " + run.name + " is not running on node " + m->node.rec.name +
                "; nothing to checkpoint");
    return kExitRefused;
  }
  std::printf(
      "asked run %s for a checkpoint at its next step (node %s); it appears in "
      "flotilla runs checkpoints %s\n",
      run.name.c_str(), m->node.rec.name.c_str(), run.name.c_str());
  return kExitOk;
}

std::vector<std::string> parse_node_list(const std::string& text, const std::string& option) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    const std::string name =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
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
    n = runs::ranks_per_node(req.config, m, req.nproc_per_node);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  // Connect everything first: an untrusted host refuses the run before anything starts (S3).
  if (!connect_all(ctx, nodes)) return kExitRefused;

  runs::StartRequest start;
  start.config = req.config;
  start.name = req.name;
  start.budget_usd = req.budget_usd;
  start.nproc_per_node = n;
  start.master_port = req.master_port;
  start.no_bind = req.no_bind;
  start.worker_path = runs::find_worker();
  start.version = FLOTILLA_VERSION_STRING;
  const auto progress = [&](const std::string& line) {
    if (!req.quiet) std::printf("%s\n", line.c_str());
  };
  const runs::Watch w = runs::start_on_nodes(db, nodes, start, progress);
  if (!req.quiet) {
    std::printf("run %s (id %lld): %d node(s) x %d rank(s), remote dir ~/.flotilla/runs/%s\n",
                req.name.c_str(), static_cast<long long>(w.run_id), m, n, w.rid.c_str());
    std::fflush(stdout);
  }
  RecoveryRequest rr = req.recovery;
  rr.no_bind = req.no_bind;
  const runs::Recovery recovery = make_recovery(ctx, db, rr, checkpoints_dir_of(ctx, req.name));
  // The choice goes with the run: `runs attach` and the app follow it when they re-attach.
  runs::RecoveryPolicy policy;
  policy.enabled = rr.auto_recover;
  policy.spares = rr.spares;
  policy.max_recoveries = rr.max_recoveries;
  policy.settle_seconds = rr.recover_after_s;
  policy.mirror = rr.mirror;
  runs::record_recovery_policy(db, w.run_id, policy);
  const StopSignals signals;
  return watch(ctx, nodes, w, req.quiet, recovery);
}

int attach_nodes_run(const Context& ctx, const std::string& run_name, bool quiet, const RecoveryRequest& rr) {
  const StopSignals signals;  // from here on, Ctrl-C stops the run on every node once attached
  db::Database db = open_store(ctx);
  const db::Run run = db::get_run(db, run_name);
  std::vector<Node> nodes;
  std::string rid;
  if (const std::string why = runs::attach_target(db, run, nodes, rid); !why.empty()) {
    note_stderr(why);
    return kExitRefused;
  }
  if (!connect_all(ctx, nodes)) return kExitRefused;
  std::string refusal;
  bool running = false;
  const runs::Watch w = runs::attach_watch(run, nodes, rid, "flotilla runs attach", refusal, running);
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
  RecoveryRequest effective = rr;
  if (!rr.auto_recover) {  // without options: what the run's starter chose, less recoveries done
    const runs::RecoveryPolicy p = runs::stored_recovery_policy(db, run.id);
    if (p.enabled) {
      effective.auto_recover = true;
      for (const auto& spare : p.spares)  // a spare that has replaced a node since is no longer one
        if (std::none_of(nodes.begin(), nodes.end(), [&](const Node& n) { return n.rec.name == spare; }))
          effective.spares.push_back(spare);
      effective.max_recoveries = p.max_recoveries;
      effective.recover_after_s = p.settle_seconds;
      effective.mirror = p.mirror;
      if (!quiet)
        std::printf("automatic recovery after a preemption: on, as the run was started (%d left)\n",
                    p.max_recoveries);
    }
  }
  for (const auto& spare : effective.spares)
    for (const auto& n : nodes)
      if (n.rec.name == spare)
        throw UsageError("--spare names node '" + spare + "', which the run already uses");
  return watch(ctx, nodes, w, quiet, make_recovery(ctx, db, effective, checkpoints_dir_of(ctx, run.name)));
}

int resume_nodes_run(const Context& ctx, const std::string& run_name, const RecoveryRequest& rr, bool quiet) {
  const StopSignals signals;
  db::Database db = open_store(ctx);
  const db::Run run = db::get_run(db, run_name);
  std::vector<Node> nodes;
  std::string rid;
  if (const std::string why = runs::attach_target(db, run, nodes, rid, true); !why.empty()) {
    note_stderr(why);
    return kExitRefused;
  }
  if (run.status == db::RunStatus::kRunning) {
    note_stderr("run " + run.name + " is running already; to watch it: flotilla runs attach " + run.name);
    return kExitRefused;
  }
  for (const auto& spare : rr.spares)
    for (const auto& n : nodes)
      if (n.rec.name == spare)
        throw UsageError("--spare names node '" + spare + "', which the run already uses");
  // Host-key problems refuse the resume; a node that does not answer is left to restart_on_nodes.
  for (auto& n : nodes) {
    n.session = std::make_unique<remote::Session>(node_session_options(ctx, n.rec));
    try {
      n.session->connect();
    } catch (const remote::HostKeyError& e) {
      std::fprintf(stderr, "flotilla: %s\n", host_key_message(n.rec.name, e).c_str());
      return kExitRefused;
    } catch (const Error& e) {
      note_stderr("node " + n.rec.name + " does not answer: " + e.what());
    }
  }
  runs::Watch w;
  w.run_id = run.id;
  w.name = run.name;
  w.rid = rid;
  const runs::Recovery recovery = make_recovery(ctx, db, rr, checkpoints_dir_of(ctx, run.name));
  std::vector<db::SshNode> spares = recovery.spares;
  db::Writer writer(database_path(ctx));
  const std::string why = runs::restart_on_nodes(writer, nodes, w, recovery, spares,
                                                 "resumed by flotilla runs resume", false, note_stderr);
  if (!why.empty()) {
    note_stderr(why);
    return kExitRefused;
  }
  if (!quiet) {
    std::printf("resumed run %s (id %lld) on %s, remote dir ~/.flotilla/runs/%s\n", run.name.c_str(),
                static_cast<long long>(run.id), db::get_run(db, run.id).target.c_str(), rid.c_str());
    std::fflush(stdout);
  }
  return watch(ctx, nodes, w, quiet, recovery);
}

}  // namespace flotilla::cli
