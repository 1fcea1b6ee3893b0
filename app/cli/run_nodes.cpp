// `flotilla run CONFIG --nodes a,b`: deploy, start every node's ranks detached, tail, stop; and
// `flotilla runs attach RUN`: the same tail and stop for a run whose watching process died.
//
// Decision: the nodes own the run, this process only watches it. Every node's ranks are started
// detached (remote_run.h: setsid, flock, pid), so a dropped SSH connection, or this command being
// killed, leaves training running; rank 0's metrics.jsonl is tailed by byte offset and the offset
// is committed in the same transaction as the rows it covers (ingest_offsets, source
// "ssh:<node>:metrics.jsonl"), so reconnecting resumes exactly after the last stored line: no step
// lost or doubled (RELIABILITY S4/S6). Ctrl-C stops every node (TERM, then KILL after the grace).
// The run is recorded as running from node 0's own start time, so costs accrue from the real
// start, on every node at its own price; `runs attach` reconnects and continues the same watch
// (watch_run) from the committed offset, so the store cannot tell the two apart.
#include "app/cli/run_nodes.h"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <thread>

#include "app/cli/node_session.h"
#include "db/costs.h"
#include "db/errors.h"
#include "db/ingest.h"
#include "db/nodes.h"
#include "db/queries.h"
#include "db/run_store.h"
#include "db/sql.h"
#include "db/writer.h"
#include "engine/config/config_io.h"
#include "engine/core/error.h"
#include "flotilla/build_info.h"
#include "remote/deploy.h"
#include "remote/remote_run.h"

namespace flotilla::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::atomic<int> g_stop_signal{0};
void on_stop_signal(int sig) { g_stop_signal = sig; }

// While alive, SIGINT/SIGTERM only set g_stop_signal (acted on by watch_run: stop every node).
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

// The remote run directory name: the run name made safe, plus the store id (unique per workspace).
std::string remote_id(const std::string& name, int64_t id) {
  std::string out;
  for (char c : name) {
    const bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' ||
                    c == '_' || c == '-';
    out.push_back(ok ? c : '_');
  }
  while (!out.empty() && (out.front() == '-' || out.front() == '.')) out.erase(out.begin());
  if (out.size() > 40) out.resize(40);
  return (out.empty() ? std::string("run") : out) + "-" + std::to_string(id);
}

struct Node {
  db::SshNode rec;
  std::unique_ptr<remote::Session> session;
  std::string worker;
};

// Runs `fn` on the node's session; on a dropped link reconnects with backoff and tries again.
template <typename F>
auto with_reconnect(Node& n, F&& fn) -> decltype(fn(*n.session)) {
  for (int attempt = 0;; ++attempt) {
    try {
      return fn(*n.session);
    } catch (const remote::ConnectionLost& e) {
      if (attempt >= 3) throw;
      std::fprintf(stderr,
                   "flotilla: connection to node %s lost (%s); the run keeps going there; reconnecting...\n",
                   n.rec.name.c_str(), e.what());
      n.session->reconnect({0.5, 2, 10, 8});
      std::fprintf(stderr, "flotilla: reconnected to node %s; re-attached\n", n.rec.name.c_str());
    }
  }
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

int world_size(const RunConfig& c) {
  const int n = c.parallel.dp * c.parallel.tp * c.parallel.pp;
  return n > 0 ? n : 1;
}

// What watching a started remote run needs besides its connected nodes (node 0 = the master).
struct Watch {
  int64_t run_id = 0;
  std::string name, rid;  // the store's run name; the remote run directory's name
  int64_t total_steps = 0;
  std::optional<double> budget_usd;
  bool quiet = false;
  std::function<void(db::Database&)> on_attach;  // run on the writer before tailing
};

// Watches a started run until node 0's worker exits: tails rank 0's metrics from the committed
// offset into the store, stops every node on SIGINT/SIGTERM or at the budget, records the final
// status (ended when node 0's wrapper recorded the exit) and returns node 0's exit status. The
// caller holds a StopSignals.
int watch_run(const Context& ctx, std::vector<Node>& nodes, const Watch& w) {
  const int64_t run_id = w.run_id;
  const std::string& rid = w.rid;
  const std::string path = database_path(ctx);
  db::Writer writer(path);
  db::Database reader(path);
  if (w.on_attach) writer.run(w.on_attach);


  const std::string source = "ssh:" + nodes[0].rec.name + ":metrics.jsonl";
  uint64_t offset = static_cast<uint64_t>(db::committed_offset(reader, run_id, source));
  db::Ingestor ingestor(writer, run_id);
  Clock::time_point last_print{};
  if (!w.quiet) ingestor.on_record = [&](const db::IngestEvent& e) { print_step(e, w.total_steps, last_print); };

  // Reads new complete lines of rank 0's metrics and commits them with their offset.
  const auto pull = [&]() -> bool {
    const remote::TailChunk t =
        with_reconnect(nodes[0], [&](remote::Session& s) { return remote::tail_run_file(s, rid, offset); });
    if (t.lines.empty()) return false;
    std::string text;
    for (const auto& l : t.lines) (text += l) += '\n';
    ingestor.parse_lines(text);
    const int64_t new_offset = static_cast<int64_t>(t.offset);
    const db::Ticket ticket = ingestor.submit_with([=](db::Database& w) {
      db::Stmt up(w,
                  "INSERT INTO ingest_offsets(run_id, source, byte_offset, updated_at) VALUES (?1, ?2, ?3, ?4) "
                  "ON CONFLICT(run_id, source) DO UPDATE SET byte_offset = excluded.byte_offset, "
                  "updated_at = excluded.updated_at");
      up.bind(1, run_id).bind(2, source).bind(3, new_offset).bind(4, db::now_seconds()).run();
    });
    if (!writer.wait(ticket))
      throw db::DbError(db::DbErrorKind::kFull, "storing metrics of run " + w.name + " at byte " +
                                                    std::to_string(offset) + " failed: " + writer.stats().last_error);
    offset = t.offset;
    return true;
  };
  const auto stop_all = [&](const char* why) {
    std::fprintf(stderr, "flotilla: %s: stopping the run on every node (checkpoint, then exit)\n", why);
    for (auto& node : nodes) {
      try {
        with_reconnect(node, [&](remote::Session& s) { return remote::stop_remote_run(s, rid, 30); });
      } catch (const Error& e) {
        std::fprintf(stderr, "flotilla: stopping node %s failed: %s\n", node.rec.name.c_str(), e.what());
      }
    }
  };

  remote::RemoteRunStatus final0;
  bool user_stop = false, budget_stop = false;
  auto last_status = Clock::now() - std::chrono::seconds(10);
  auto last_budget = Clock::now();
  int exit_code = 1;
  try {
    for (;;) {
      if (g_stop_signal.load() != 0 && !user_stop) {
        user_stop = true;
        stop_all("stop requested");
      }
      const bool got = pull();
      const auto now = Clock::now();
      if (now - last_status >= std::chrono::seconds(1)) {
        last_status = now;
        final0 = with_reconnect(nodes[0], [&](remote::Session& s) { return remote::remote_run_status(s, rid); });
        if (final0.state == remote::RunState::kExited) {
          while (pull()) {
          }
          break;
        }
      }
      if (w.budget_usd && now - last_budget >= std::chrono::seconds(2) && !budget_stop) {
        last_budget = now;
        const db::BudgetStatus b = db::budget_status(reader, run_id);
        if (b.action == db::BudgetAction::kStop) {
          budget_stop = true;
          std::fprintf(stderr, "flotilla: %s\n", b.message.c_str());
          stop_all("budget reached");
        }
      }
      if (!got) std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    exit_code = final0.exit_code >= 0 ? final0.exit_code : 1;
    // The other nodes end with node 0; record how they ended (a stuck one is stopped).
    for (size_t i = 1; i < nodes.size(); ++i) {
      remote::RemoteRunStatus st;
      const auto until = Clock::now() + std::chrono::seconds(30);
      do {
        st = with_reconnect(nodes[i], [&](remote::Session& s) { return remote::remote_run_status(s, rid); });
        if (st.state != remote::RunState::kRunning) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
      } while (Clock::now() < until);
      if (st.state == remote::RunState::kRunning)
        st = with_reconnect(nodes[i], [&](remote::Session& s) { return remote::stop_remote_run(s, rid, 10); });
      if (st.exit_code != 0)
        std::fprintf(stderr, "flotilla: node %s ended with exit %d (~/.flotilla/runs/%s/stdout.log there)\n",
                     nodes[i].rec.name.c_str(), st.exit_code, rid.c_str());
    }
  } catch (const remote::ConnectionLost& e) {
    writer.flush();
    std::fprintf(stderr,
                 "flotilla: lost node %s and could not reconnect: %s\nThe run may still be going on the nodes; it "
                 "stays 'running' in the store.\n",
                 nodes[0].rec.name.c_str(), e.what());
    return static_cast<int>(ExitCode::kComm);
  }
  ingestor.finish();
  writer.flush();

  db::RunStatus final_status = db::RunStatus::kFailed;
  std::string reason = "node " + nodes[0].rec.name + " worker exit " + std::to_string(exit_code);
  if (exit_code == 0) {
    final_status = db::RunStatus::kCompleted;
  } else if (exit_code == static_cast<int>(ExitCode::kPreempted)) {
    final_status = (user_stop || budget_stop) ? db::RunStatus::kStopped : db::RunStatus::kPreempted;
    if (user_stop) reason += " (stopped by signal)";
    if (budget_stop) reason += " (budget reached)";
  }
  writer.run([&](db::Database& wdb) {
    const db::Run now = db::get_run(wdb, run_id);
    const db::RunStatus to = db::transition_allowed(now.status, final_status) ? final_status : now.status;
    db::set_status(wdb, run_id, to, static_cast<double>(final0.ended_at), reason, exit_code);
  });
  writer.flush();
  if (!w.quiet) {
    const db::RunSummary s = db::run_summary(reader, run_id);
    std::printf("run %s %s: %lld steps, final loss %s, %s, $%.4f\n", w.name.c_str(), s.status.c_str(),
                static_cast<long long>(s.steps), s.final_loss ? format_number(*s.final_loss).c_str() : "-",
                format_duration(s.wall_s).c_str(), db::run_cost_usd(reader, run_id));
  }
  return exit_code;
}

}  // namespace

std::vector<std::string> parse_node_list(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    const std::string name = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (name.empty()) throw UsageError("--nodes needs node names separated by commas, e.g. --nodes a,b");
    for (const auto& seen : out)
      if (seen == name) throw UsageError("--nodes names node '" + name + "' twice");
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
  const int world = world_size(req.config);
  const int n = req.nproc_per_node.value_or(world / m);
  if (n < 1 || n * m != world)
    throw UsageError("parallel.dp*tp*pp = " + std::to_string(world) + " ranks cannot be split as " +
                     std::to_string(m) + " node(s) x " + std::to_string(n) +
                     " rank(s): set parallel.dp (or --nproc-per-node) so that nodes x ranks per node = world");

  // Connect everything first: an untrusted host refuses the run before anything starts (S3).
  for (auto& node : nodes) {
    node.session = std::make_unique<remote::Session>(node_session_options(ctx, node.rec));
    try {
      node.session->connect();
    } catch (const remote::HostKeyError& e) {
      std::fprintf(stderr, "flotilla: %s\n", host_key_message(node.rec.name, e).c_str());
      return kExitRefused;
    }
  }

  RunConfig config = req.config;
  config.run.name = req.name;
  db::NewRun nr;
  nr.name = req.name;
  nr.config_toml = config_to_toml(config);
  nr.config_json = config_to_json(config, -1);
  nr.budget_usd = req.budget_usd;
  nr.target.clear();  // "a,b": the nodes, the master first
  for (const auto& node : nodes) nr.target += (nr.target.empty() ? "" : ",") + node.rec.name;
  const int64_t run_id = db::create_run(db, nr);
  const std::string rid = remote_id(req.name, run_id);
  for (const auto& node : nodes) db::attach_node(db, run_id, node.rec.id, n);

  int master_port = req.master_port.value_or(0);
  if (master_port == 0) {
    std::random_device rd;
    master_port = 20000 + static_cast<int>(rd() % 20000);
  }
  remote::RemoteRunSpec spec;
  spec.run_id = rid;
  spec.nnodes = m;
  spec.nproc_per_node = n;
  spec.master_addr = nodes[0].rec.host;
  spec.master_port = master_port;
  if (req.no_bind) spec.launch_args = {"--no-bind"};

  remote::DeployOptions deploy;
  deploy.worker_path = local_worker();
  deploy.version = FLOTILLA_VERSION_STRING;
  const std::string toml = config_to_toml(config);
  for (auto& node : nodes) {
    remote::Session& s = *node.session;
    const remote::DeployResult d = remote::deploy_worker(s, deploy);
    node.worker = d.worker;
    if (!req.quiet)
      std::printf("node %s: worker %s (%s)\n", node.rec.name.c_str(), d.dir.c_str(), d.reused ? "reused" : "uploaded");
    remote::upload_run_config(s, rid, toml);
    if (config.data.source == "synthetic") {  // the worker makes it on global rank 0 only: one per node
      const auto& c = config;
      const std::string dir = remote::remote_run_dir(s, rid) + "/data/synthetic-v" + std::to_string(c.model.vocab_size) +
                              "-s" + std::to_string(c.run.seed) + "-n" + std::to_string(c.data.synthetic_tokens);
      const remote::ExecResult r = s.exec_argv(
          {d.worker, "data", "synth", "--out", dir, "--vocab", std::to_string(c.model.vocab_size), "--tokens",
           std::to_string(c.data.synthetic_tokens), "--val-tokens",
           std::to_string(std::max<int64_t>(c.data.synthetic_tokens / 10, 1)), "--seed", std::to_string(c.run.seed)},
          600);
      if (r.exit_status != 0)
        throw Error(ExitCode::kComm, "node " + node.rec.name + ": generating the synthetic corpus failed: " + r.err);
    }
  }
  db::set_run_dir(db, run_id, nodes[0].rec.name + ":" + remote::remote_run_dir(*nodes[0].session, rid));

  remote::RemoteRunStatus started;
  for (int r = m - 1; r >= 0; --r) {
    spec.worker = nodes[static_cast<size_t>(r)].worker;
    spec.node_rank = r;
    started = remote::start_remote_run(*nodes[static_cast<size_t>(r)].session, spec);
  }
  const double start_time = started.started_at > 0 ? static_cast<double>(started.started_at) : db::now_seconds();

  Watch w;
  w.run_id = run_id;
  w.name = req.name;
  w.rid = rid;
  w.total_steps = config.train.steps;
  w.budget_usd = req.budget_usd;
  w.quiet = req.quiet;
  const std::string why = "flotilla run --nodes: " + std::to_string(m) + " node(s) x " + std::to_string(n) +
                          " rank(s), master " + spec.master_addr + ":" + std::to_string(master_port);
  w.on_attach = [=](db::Database& wdb) { db::set_status(wdb, run_id, db::RunStatus::kRunning, start_time, why); };
  if (!req.quiet) {
    std::printf("run %s (id %lld): %d node(s) x %d rank(s), remote dir ~/.flotilla/runs/%s\n", req.name.c_str(),
                static_cast<long long>(run_id), m, n, rid.c_str());
    std::fflush(stdout);
  }
  const StopSignals signals;
  return watch_run(ctx, nodes, w);
}

int attach_nodes_run(const Context& ctx, const std::string& run_name, bool quiet) {
  const StopSignals signals;  // from here on, Ctrl-C stops the run on every node once attached
  db::Database db = open_store(ctx);
  const db::Run run = db::get_run(db, run_name);
  // run_dir is "<master node>:<absolute dir on it>" (set before any rank starts).
  const auto colon = run.run_dir.find(':');
  if (colon == std::string::npos || colon == 0 || run.run_dir.find('/', colon) != colon + 1) {
    std::fprintf(stderr, "flotilla: run %s is not a run on SSH nodes (run dir '%s'); nothing to attach to\n",
                 run.name.c_str(), run.run_dir.c_str());
    return kExitRefused;
  }
  const std::string master = run.run_dir.substr(0, colon);
  const std::string rid = run.run_dir.substr(run.run_dir.rfind('/') + 1);
  if (const std::string why = remote::validate_run_id(rid); !why.empty())
    throw db::DbError(db::DbErrorKind::kInvalid, "run " + run.name + ": the stored run dir '" + run.run_dir +
                                                     "' does not name a remote run directory: " + why);
  const bool terminal = run.status == db::RunStatus::kCompleted || run.status == db::RunStatus::kFailed ||
                        run.status == db::RunStatus::kStopped;
  if (terminal) {
    std::fprintf(stderr, "flotilla: run %s already ended (%s); nothing to attach to\n", run.name.c_str(),
                 db::to_string(run.status));
    return kExitRefused;
  }

  // The run's nodes (run_nodes), the master first.
  std::vector<Node> nodes;
  nodes.push_back(Node{db::get_ssh_node(db, master), nullptr, ""});
  for (db::SshNode& rec : db::run_ssh_nodes(db, run.id))
    if (rec.name != master) nodes.push_back(Node{std::move(rec), nullptr, ""});
  for (auto& node : nodes) {
    node.session = std::make_unique<remote::Session>(node_session_options(ctx, node.rec));
    try {
      node.session->connect();
    } catch (const remote::HostKeyError& e) {
      std::fprintf(stderr, "flotilla: %s\n", host_key_message(node.rec.name, e).c_str());
      return kExitRefused;
    }
  }
  const remote::RemoteRunStatus st =
      with_reconnect(nodes[0], [&](remote::Session& s) { return remote::remote_run_status(s, rid); });
  if (st.state == remote::RunState::kNotStarted) {
    std::fprintf(stderr,
                 "flotilla: run %s was never started on node %s (~/.flotilla/runs/%s); nothing to attach to\n",
                 run.name.c_str(), master.c_str(), rid.c_str());
    return kExitRefused;
  }

  Watch w;
  w.run_id = run.id;
  w.name = run.name;
  w.rid = rid;
  w.quiet = quiet;
  w.budget_usd = run.budget_usd;
  try {
    w.total_steps = parse_config_toml(run.config_toml, "run " + run.name).train.steps;
  } catch (const Error&) {
    w.total_steps = 0;  // progress lines then show step N/0; the run is watched all the same
  }
  // Costs: a run the store still has as running keeps its open accruals (opened at the real start
  // on the node), so the time this command was away is charged once, with no gap. A run halted in
  // the store (e.g. marked preempted) while its ranks kept going resumes charging from where it was
  // halted, never from now.
  if (run.status != db::RunStatus::kRunning) {
    const double since = run.ended_at.value_or(run.started_at.value_or(static_cast<double>(st.started_at)));
    w.on_attach = [id = run.id, since](db::Database& wdb) {
      const db::Run now = db::get_run(wdb, id);
      if (now.status != db::RunStatus::kRunning && db::transition_allowed(now.status, db::RunStatus::kRunning))
        db::set_status(wdb, id, db::RunStatus::kRunning, since, "flotilla runs attach: the run is still going");
    };
  }
  if (!quiet) {
    std::printf("attached to run %s (id %lld) on %zu node(s), remote dir ~/.flotilla/runs/%s, %s\n",
                run.name.c_str(), static_cast<long long>(run.id), nodes.size(), rid.c_str(),
                st.state == remote::RunState::kRunning ? "running" : "already exited");
    std::fflush(stdout);
  }
  return watch_run(ctx, nodes, w);
}

}  // namespace flotilla::cli
