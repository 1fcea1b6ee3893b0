// A run on SSH nodes without any Qt (see noderun_core.h). Moved out of app/cli/run_nodes.cpp so
// the CLI and the app share one implementation.
//
// Decision: the nodes own the run, the caller only watches it. Every node's ranks are started
// detached (remote_run.h: setsid, flock, pid), so a dropped SSH connection, or the watcher going
// away, leaves training running; rank 0's metrics.jsonl is tailed by byte offset and the offset is
// committed in the same transaction as the rows it covers (ingest_offsets, source
// "ssh:<node>:metrics.jsonl"), so reconnecting resumes exactly after the last stored line: no step
// lost or doubled (RELIABILITY S4/S6). The run is recorded as running from node 0's own start time.
#include "ui/runs/noderun_core.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>

#include "db/costs.h"
#include "db/errors.h"
#include "db/queries.h"
#include "db/run_store.h"
#include "db/writer.h"
#include "engine/config/config_io.h"
#include "engine/core/error.h"
#include "remote/deploy.h"
#include "remote/probe.h"
#include "remote/remote_run.h"
#include "remote/validate.h"
#include "ui/nodes/nodebridge.h"

namespace flotilla::ui::noderun {
namespace {

using Clock = std::chrono::steady_clock;

// One line per GPU, the columns remote::parse_nvidia_smi_csv reads; a marker when there is none.
constexpr const char* kGpuQuery =
    "if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi --query-gpu=index,name,memory.total,memory.used,"
    "utilization.gpu,temperature.gpu,power.draw,driver_version --format=csv,noheader,nounits; "
    "else echo flotilla:no-nvidia-smi; fi";

// The remote run directory name: the run name made safe, plus the store id (unique per workspace).
std::string remoteId(const std::string& name, int64_t id) {
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

// Runs `fn` on the node's session; on a dropped link reconnects with backoff and tries again.
template <typename F>
auto withReconnect(Node& n, const Note& note, F&& fn, const remote::Backoff& backoff = {0.5, 2, 10, 8})
    -> decltype(fn(*n.session)) {
  for (int attempt = 0;; ++attempt) {
    try {
      return fn(*n.session);
    } catch (const remote::ConnectionLost& e) {
      if (attempt >= 3) throw;
      if (note) note("connection to node " + n.rec.name + " lost (" + e.what() + "); the run keeps going there; reconnecting...");
      n.session->reconnect(backoff);
      if (note) note("reconnected to node " + n.rec.name + "; re-attached");
    }
  }
}

}  // namespace

bool connectNodes(std::vector<Node>& nodes, const SessionOptionsFor& options,
                  const std::function<void(const std::string&, const remote::HostKeyError&)>& refused) {
  for (auto& node : nodes) {
    node.session = std::make_unique<remote::Session>(options(node.rec));
    try {
      node.session->connect();
    } catch (const remote::HostKeyError& e) {
      if (refused) refused(node.rec.name, e);
      return false;
    }
  }
  return true;
}

int ranksPerNode(const RunConfig& config, int nodes, std::optional<int> requested) {
  int world = config.parallel.dp * config.parallel.tp * config.parallel.pp;
  if (world <= 0) world = 1;
  const int n = requested.value_or(world / nodes);
  if (n < 1 || n * nodes != world)
    throw Error(ExitCode::kConfig, "parallel.dp*tp*pp = " + std::to_string(world) + " ranks cannot be split as " +
                                       std::to_string(nodes) + " node(s) x " + std::to_string(n) +
                                       " rank(s): set parallel.dp (or --nproc-per-node) so that nodes x ranks per "
                                       "node = world");
  return n;
}

// Measures the links between the run's nodes (stored for the Nodes page's matrix) and notes the
// slowest one; a failed measurement never stops the run.
static void noteLatency(db::Database& db, std::vector<Node>& nodes, const Note& note) {
  std::vector<LatencyNode> refs;
  for (auto& n : nodes) refs.push_back({n.rec, n.session.get(), n.worker, ""});
  try {
    const std::vector<db::NodeLatency> rows = measureLatencyMatrix(db, refs, 3);
    const auto nameOf = [&](int64_t id) {
      for (const auto& n : nodes)
        if (n.rec.id == id) return n.rec.name;
      return std::string("this machine");
    };
    const db::NodeLatency* worst = nullptr;
    std::string errors;
    for (const auto& r : rows) {
      if (nameOf(r.from_node) == "this machine" || nameOf(r.to_node) == "this machine" || r.from_node == r.to_node)
        continue;
      if (!r.error.empty()) errors += "; " + nameOf(r.from_node) + " -> " + nameOf(r.to_node) + ": " + r.error;
      else if (r.rtt_ms && (!worst || *r.rtt_ms > *worst->rtt_ms)) worst = &r;
    }
    if (!note) return;
    if (worst) {
      char ms[32];
      std::snprintf(ms, sizeof ms, "%.2f", *worst->rtt_ms);
      note("latency between nodes: slowest link " + nameOf(worst->from_node) + " -> " + nameOf(worst->to_node) + " " +
           ms + " ms (TCP connect to sshd)");
    }
    if (!errors.empty()) note("latency between nodes: " + errors.substr(2) + " (the ranks may not reach each other)");
  } catch (const std::exception& e) {
    if (note) note(std::string("latency between nodes not measured: ") + e.what());
  }
}

void prepareNode(Node& node, const std::string& rid, const RunConfig& config, const remote::DeployOptions& deploy,
                 const Note& note) {
  remote::Session& s = *node.session;
  const remote::DeployResult d = remote::deploy_worker(s, deploy);
  node.worker = d.worker;
  if (note) note("node " + node.rec.name + ": worker " + d.dir + " (" + (d.reused ? "reused" : "uploaded") + ")");
  remote::upload_run_config(s, rid, config_to_toml(config));
  if (config.data.source != "synthetic") return;
  // The worker makes the synthetic corpus on global rank 0 only: one per node, made here.
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

int randomMasterPort() {
  std::random_device rd;
  return 20000 + static_cast<int>(rd() % 12768);
}

Watch startOnNodes(db::Database& db, std::vector<Node>& nodes, const StartRequest& req, const Note& note) {
  const int m = static_cast<int>(nodes.size());
  const int n = ranksPerNode(req.config, m, req.nprocPerNode);
  RunConfig config = req.config;
  config.run.name = req.name;
  db::NewRun nr;
  nr.name = req.name;
  nr.config_toml = config_to_toml(config);
  nr.config_json = config_to_json(config, -1);
  nr.budget_usd = req.budgetUsd;
  nr.target.clear();  // "a,b": the nodes, the master first
  for (const auto& node : nodes) nr.target += (nr.target.empty() ? "" : ",") + node.rec.name;
  const int64_t runId = db::create_run(db, nr);
  const std::string rid = remoteId(req.name, runId);
  for (const auto& node : nodes) db::attach_node(db, runId, node.rec.id, n);

  int masterPort = req.masterPort.value_or(0);
  if (masterPort == 0) masterPort = randomMasterPort();
  remote::RemoteRunSpec spec;
  spec.run_id = rid;
  spec.nnodes = m;
  spec.nproc_per_node = n;
  spec.master_addr = nodes[0].rec.host;
  spec.master_port = masterPort;
  if (req.noBind) spec.launch_args = {"--no-bind"};

  remote::DeployOptions deploy;
  deploy.worker_path = req.workerPath;
  deploy.version = req.version;
  for (auto& node : nodes) prepareNode(node, rid, config, deploy, note);
  if (m > 1) noteLatency(db, nodes, note);
  db::set_run_dir(db, runId, nodes[0].rec.name + ":" + remote::remote_run_dir(*nodes[0].session, rid));

  remote::RemoteRunStatus started;
  for (int r = m - 1; r >= 0; --r) {
    spec.worker = nodes[static_cast<size_t>(r)].worker;
    spec.node_rank = r;
    started = remote::start_remote_run(*nodes[static_cast<size_t>(r)].session, spec);
  }
  const double startTime = started.started_at > 0 ? static_cast<double>(started.started_at) : db::now_seconds();

  Watch w;
  w.runId = runId;
  w.name = req.name;
  w.rid = rid;
  w.totalSteps = config.train.steps;
  w.budgetUsd = req.budgetUsd;
  const std::string why = req.origin + ": " + std::to_string(m) + " node(s) x " + std::to_string(n) +
                          " rank(s), master " + spec.master_addr + ":" + std::to_string(masterPort);
  w.onAttach = [=](db::Database& wdb) { db::set_status(wdb, runId, db::RunStatus::kRunning, startTime, why); };
  return w;
}

bool isNodeRunDir(const std::string& runDir) {
  const auto colon = runDir.find(':');
  return colon != std::string::npos && colon > 0 && runDir.find('/') == colon + 1;
}

std::string attachTarget(db::Database& db, const db::Run& run, std::vector<Node>& nodes, std::string& rid,
                         bool resuming) {
  // run_dir is "<master node>:<absolute dir on it>" (set before any rank starts).
  const auto colon = run.run_dir.find(':');
  if (!isNodeRunDir(run.run_dir))
    return "run " + run.name + " is not a run on SSH nodes (run dir '" + run.run_dir + "'); nothing to attach to";
  const std::string master = run.run_dir.substr(0, colon);
  rid = run.run_dir.substr(run.run_dir.rfind('/') + 1);
  if (const std::string why = remote::validate_run_id(rid); !why.empty())
    throw db::DbError(db::DbErrorKind::kInvalid, "run " + run.name + ": the stored run dir '" + run.run_dir +
                                                     "' does not name a remote run directory: " + why);
  const bool terminal = run.status == db::RunStatus::kCompleted ||
                        (!resuming && (run.status == db::RunStatus::kFailed || run.status == db::RunStatus::kStopped));
  if (terminal)
    return "run " + run.name + " already ended (" + db::to_string(run.status) + "); nothing to attach to";
  nodes.clear();
  nodes.push_back(Node{db::get_ssh_node(db, master), nullptr, ""});
  for (db::SshNode& rec : db::run_ssh_nodes(db, run.id))
    if (rec.name != master) nodes.push_back(Node{std::move(rec), nullptr, ""});
  return "";
}

Watch attachWatch(const db::Run& run, std::vector<Node>& nodes, const std::string& rid, const std::string& origin,
                  std::string& refusal, bool& stillRunning) {
  const remote::RemoteRunStatus st =
      withReconnect(nodes[0], nullptr, [&](remote::Session& s) { return remote::remote_run_status(s, rid); });
  refusal.clear();
  stillRunning = st.state == remote::RunState::kRunning;
  Watch w;
  if (st.state == remote::RunState::kNotStarted) {
    refusal = "run " + run.name + " was never started on node " + nodes[0].rec.name + " (~/.flotilla/runs/" + rid +
              "); nothing to attach to";
    return w;
  }
  w.runId = run.id;
  w.name = run.name;
  w.rid = rid;
  w.budgetUsd = run.budget_usd;
  try {
    w.totalSteps = parse_config_toml(run.config_toml, "run " + run.name).train.steps;
  } catch (const Error&) {
    w.totalSteps = 0;  // progress then shows step N/0; the run is watched all the same
  }
  // Costs: a run the store still has as running keeps its open accruals (opened at the real start
  // on the node), so the time nobody watched is charged once, with no gap. A run halted in the
  // store (e.g. marked preempted) while its ranks kept going resumes charging from where it was
  // halted, never from now.
  if (run.status != db::RunStatus::kRunning) {
    const double since = run.ended_at.value_or(run.started_at.value_or(static_cast<double>(st.started_at)));
    w.onAttach = [id = run.id, since, origin](db::Database& wdb) {
      const db::Run now = db::get_run(wdb, id);
      if (now.status != db::RunStatus::kRunning && db::transition_allowed(now.status, db::RunStatus::kRunning))
        db::set_status(wdb, id, db::RunStatus::kRunning, since, origin + ": the run is still going");
    };
  }
  return w;
}

int watchRun(const std::string& dbPath, std::vector<Node>& nodes, const Watch& w, const WatchHooks& hooks) {
  const int64_t runId = w.runId;
  const std::string& rid = w.rid;
  const Note& note = hooks.note;
  db::Writer writer(dbPath);
  db::Database reader(dbPath);
  if (w.onAttach) writer.run(w.onAttach);

  const std::string source = "ssh:" + nodes[0].rec.name + ":metrics.jsonl";
  uint64_t offset = static_cast<uint64_t>(db::committed_offset(reader, runId, source));
  db::Ingestor ingestor(writer, runId);
  int64_t newestCheckpoint = 0, mirrored = 0;
  ingestor.on_record = [&](const db::IngestEvent& e) {
    if (e.type == "checkpoint") newestCheckpoint = std::max(newestCheckpoint, e.step);
    if (hooks.onRecord) hooks.onRecord(e);
  };
  // With a mirror dir, each new checkpoint of the master is copied here once committed in the
  // store, so a run can resume elsewhere when the master itself is lost (superviseRun).
  const auto mirror = [&] {
    if (w.mirrorDir.empty() || newestCheckpoint <= mirrored) return;
    const int64_t step = newestCheckpoint;
    try {
      std::filesystem::create_directories(w.mirrorDir);
      remote::fetch_remote_checkpoint(*nodes[0].session, rid, step, w.mirrorDir);
      mirrored = step;
      std::vector<std::filesystem::path> kept;
      for (const auto& e : std::filesystem::directory_iterator(w.mirrorDir))
        if (e.is_directory() && e.path().filename().string().rfind("step-", 0) == 0 &&
            e.path().filename().string().find('.') == std::string::npos)
          kept.push_back(e.path());
      std::sort(kept.begin(), kept.end());
      for (size_t i = 0; i + 2 < kept.size(); ++i) std::filesystem::remove_all(kept[i]);  // the newest two stay
    } catch (const std::exception& e) {
      if (note) note("mirroring the checkpoint at step " + std::to_string(step) + " failed: " + e.what());
      mirrored = step;  // not retried: the next checkpoint is
    }
  };

  // Reads new complete lines of rank 0's metrics and commits them with their offset.
  const auto pull = [&]() -> bool {
    const remote::TailChunk t =
        withReconnect(nodes[0], note, [&](remote::Session& s) { return remote::tail_run_file(s, rid, offset); },
                      w.reconnect);
    if (t.lines.empty()) return false;
    std::string text;
    for (const auto& l : t.lines) (text += l) += '\n';
    ingestor.parse_lines(text);
    const int64_t newOffset = static_cast<int64_t>(t.offset);
    const db::Ticket ticket = ingestor.submit_with([=](db::Database& wdb) {
      db::Stmt up(wdb,
                  "INSERT INTO ingest_offsets(run_id, source, byte_offset, updated_at) VALUES (?1, ?2, ?3, ?4) "
                  "ON CONFLICT(run_id, source) DO UPDATE SET byte_offset = excluded.byte_offset, "
                  "updated_at = excluded.updated_at");
      up.bind(1, runId).bind(2, source).bind(3, newOffset).bind(4, db::now_seconds()).run();
    });
    if (!writer.wait(ticket))
      throw db::DbError(db::DbErrorKind::kFull, "storing metrics of run " + w.name + " at byte " +
                                                    std::to_string(offset) + " failed: " + writer.stats().last_error);
    offset = t.offset;
    if (hooks.onCommitted) hooks.onCommitted(t.lines, offset);
    mirror();
    return true;
  };
  const auto stopAll = [&](const std::string& why) {
    if (note) note(why + ": stopping the run on every node (checkpoint, then exit)");
    for (auto& node : nodes) {
      try {
        withReconnect(node, note, [&](remote::Session& s) { return remote::stop_remote_run(s, rid, 30); });
      } catch (const Error& e) {
        if (note) note("stopping node " + node.rec.name + " failed: " + e.what());
      }
    }
  };

  // Every few seconds, each node's GPUs into system_samples (the Live page's per-node GPU plot).
  // A node without nvidia-smi is not asked again; a failed reading never disturbs the watch.
  std::vector<bool> sampleGpus(nodes.size(), w.gpuSampleSeconds > 0);
  auto lastGpus = Clock::now() - std::chrono::hours(1);
  const auto sampleAll = [&] {
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (!sampleGpus[i] || !nodes[i].session || !nodes[i].session->connected()) continue;
      try {
        const remote::ExecResult r = nodes[i].session->exec(kGpuQuery, 10);
        if (r.exit_status == 127 || r.out.find("flotilla:no-nvidia-smi") != std::string::npos) {
          sampleGpus[i] = false;
          continue;
        }
        if (r.exit_status != 0) continue;
        const std::vector<db::SystemSample> samples =
            samplesFromGpus(nodes[i].rec.id, remote::parse_nvidia_smi_csv(r.out), db::now_seconds());
        if (!samples.empty()) writer.run([samples](db::Database& wdb) { db::insert_system_samples(wdb, samples); });
      } catch (const Error&) {
        // a lost link is the tail's business (it reconnects); the next sample simply comes later
      }
    }
  };

  remote::RemoteRunStatus final0;
  bool userStop = false, budgetStop = false;
  auto lastStatus = Clock::now() - std::chrono::seconds(10);
  auto lastBudget = Clock::now();
  int exitCode = 1;
  try {
    for (;;) {
      if (hooks.leaveRequested && hooks.leaveRequested()) {
        writer.flush();
        return kLeft;
      }
      if (!userStop && hooks.stopRequested && hooks.stopRequested()) {
        userStop = true;
        stopAll("stop requested");
      }
      if (!userStop && hooks.checkpointRequested && hooks.checkpointRequested()) {
        try {
          const bool asked = withReconnect(
              nodes[0], note, [&](remote::Session& s) { return remote::request_remote_checkpoint(s, rid); },
              w.reconnect);
          if (note)
            note(asked ? "checkpoint requested on node " + nodes[0].rec.name + ": it is written at the next step"
                       : "no checkpoint: the run is not running on node " + nodes[0].rec.name);
        } catch (const remote::ConnectionLost&) {
          throw;
        } catch (const Error& e) {
          if (note) note(std::string("asking for a checkpoint failed: ") + e.what());
        }
      }
      const bool got = pull();
      const auto now = Clock::now();
      if (w.gpuSampleSeconds > 0 && now - lastGpus >= std::chrono::duration<double>(w.gpuSampleSeconds)) {
        lastGpus = now;
        sampleAll();
      }
      if (now - lastStatus >= std::chrono::seconds(1)) {
        lastStatus = now;
        final0 = withReconnect(
            nodes[0], note, [&](remote::Session& s) { return remote::remote_run_status(s, rid); }, w.reconnect);
        if (final0.state == remote::RunState::kExited) {
          while (pull()) {
          }
          break;
        }
      }
      if (w.budgetUsd && now - lastBudget >= std::chrono::seconds(2) && !budgetStop) {
        lastBudget = now;
        const db::BudgetStatus b = db::budget_status(reader, runId);
        if (b.action == db::BudgetAction::kStop) {
          budgetStop = true;
          if (note) note(b.message);
          stopAll("budget reached");
        }
      }
      if (!got) std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    exitCode = final0.exit_code >= 0 ? final0.exit_code : 1;
    // The other nodes end with node 0; record how they ended (a stuck one is stopped).
    // A node that no longer answers (a preempted spot node) is reported, not waited for.
    for (size_t i = 1; i < nodes.size(); ++i) {
      Node& node = nodes[i];
      remote::RemoteRunStatus st;
      try {
        const auto status = [&] {
          try {
            return remote::remote_run_status(*node.session, rid);
          } catch (const remote::ConnectionLost&) {
            node.session->reconnect({0.5, 2, 2, 2});
            return remote::remote_run_status(*node.session, rid);
          }
        };
        const auto until = Clock::now() + std::chrono::seconds(30);
        do {
          st = status();
          if (st.state != remote::RunState::kRunning) break;
          std::this_thread::sleep_for(std::chrono::milliseconds(250));
        } while (Clock::now() < until);
        if (st.state == remote::RunState::kRunning) st = remote::stop_remote_run(*node.session, rid, 10);
      } catch (const Error& e) {
        if (note) note("node " + node.rec.name + " no longer answers: " + e.what());
        continue;
      }
      if (st.exit_code != 0 && note)
        note("node " + node.rec.name + " ended with exit " + std::to_string(st.exit_code) + " (~/.flotilla/runs/" +
             rid + "/stdout.log there)");
    }
  } catch (const remote::ConnectionLost& e) {
    writer.flush();
    if (note)
      note("lost node " + nodes[0].rec.name + " and could not reconnect: " + e.what() +
           "\nThe run may still be going on the nodes; it stays 'running' in the store.");
    return static_cast<int>(ExitCode::kComm);
  }
  ingestor.finish();
  writer.flush();

  db::RunStatus finalStatus = db::RunStatus::kFailed;
  std::string reason = "node " + nodes[0].rec.name + " worker exit " + std::to_string(exitCode);
  if (exitCode == 0) {
    finalStatus = db::RunStatus::kCompleted;
  } else if (exitCode == static_cast<int>(ExitCode::kPreempted)) {
    finalStatus = (userStop || budgetStop) ? db::RunStatus::kStopped : db::RunStatus::kPreempted;
    if (userStop) reason += " (stopped by request)";
    if (budgetStop) reason += " (budget reached)";
  }
  writer.run([&](db::Database& wdb) {
    const db::Run now = db::get_run(wdb, runId);
    const db::RunStatus to = db::transition_allowed(now.status, finalStatus) ? finalStatus : now.status;
    db::set_status(wdb, runId, to, static_cast<double>(final0.ended_at), reason, exitCode);
  });
  writer.flush();
  return exitCode;
}

}  // namespace flotilla::ui::noderun
