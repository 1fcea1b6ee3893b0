// A run on SSH nodes (see node_run.h): start, re-attach and watch. Recovery is in node_recover.cpp.
//
// Decision: the nodes own the run, the caller only watches it. Every node's ranks are started
// detached (remote_run.h: setsid, flock, pid), so a dropped SSH connection, or the watcher going
// away, leaves training running; rank 0's metrics.jsonl is tailed by byte offset and the offset is
// committed in the same transaction as the rows it covers (ingest_offsets, source
// "ssh:<node>:metrics.jsonl"), so reconnecting resumes exactly after the last stored line: no step
// lost or doubled (docs/reliability.md S4/S6). The run is recorded as running from node 0's own start time.
#include "runs/node_run.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

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
#include "runs/comm_efficiency.h"
#include "runs/link_job.h"
#include "runs/node_bridge.h"
#include "runs/node_models.h"
#include "runs/node_place.h"
#include "runs/pricing.h"
#include "runs/run_setup.h"
#include "runs/run_status.h"

namespace flotilla::runs {
namespace {

using Clock = std::chrono::steady_clock;

// One line per GPU, the columns remote::parse_nvidia_smi_csv reads; a marker when there is none.
constexpr const char* kGpuQuery =
    "if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi "
    "--query-gpu=index,name,memory.total,memory.used,"
    "utilization.gpu,temperature.gpu,power.draw,driver_version --format=csv,noheader,nounits; "
    "else echo flotilla:no-nvidia-smi; fi";

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

// Runs `fn` on the node's session; on a dropped link reconnects with backoff and tries again.
template <typename F>
auto with_reconnect(Node& n, const Note& note, F&& fn, const remote::Backoff& backoff = {0.5, 2, 10, 8})
    -> decltype(fn(*n.session)) {
  for (int attempt = 0;; ++attempt) {
    try {
      return fn(*n.session);
    } catch (const remote::ConnectionLost& e) {
      if (attempt >= 3) throw;
      if (note)
        note("connection to node " + n.rec.name + " lost (" + e.what() +
             "); the run keeps going there; reconnecting...");
      n.session->reconnect(backoff);
      if (note) note("reconnected to node " + n.rec.name + "; re-attached");
    }
  }
}

}  // namespace

bool connect_nodes(std::vector<Node>& nodes, const SessionOptionsFor& options,
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

int ranks_per_node(const RunConfig& config, int nodes, std::optional<int> requested) {
  int world = config.parallel.dp * config.parallel.tp * config.parallel.pp;
  if (world <= 0) world = 1;
  const int n = requested.value_or(world / nodes);
  if (n < 1 || n * nodes != world)
    throw Error(ExitCode::kConfig,
                "parallel.dp*tp*pp = " + std::to_string(world) + " ranks cannot be split as " +
                    std::to_string(nodes) + " node(s) x " + std::to_string(n) +
                    " rank(s): set parallel.dp (or --nproc-per-node) so that nodes x ranks per "
                    "node = world");
  return n;
}

// Measures the links between the run's nodes (stored for the Nodes page's matrix) and notes the
// slowest one; a failed measurement never stops the run.
static void note_latency(db::Database& db, std::vector<Node>& nodes, const Note& note) {
  std::vector<LatencyNode> refs;
  for (auto& n : nodes) refs.push_back({n.rec, n.session.get(), n.worker, ""});
  try {
    const std::vector<db::NodeLatency> rows = measure_and_store_latency(db, refs, 3);
    const auto name_of = [&](int64_t id) {
      for (const auto& n : nodes)
        if (n.rec.id == id) return n.rec.name;
      return std::string("this machine");
    };
    const db::NodeLatency* worst = nullptr;
    std::string errors;
    for (const auto& r : rows) {
      if (name_of(r.from_node) == "this machine" || name_of(r.to_node) == "this machine" ||
          r.from_node == r.to_node)
        continue;
      if (!r.error.empty())
        errors += "; " + name_of(r.from_node) + " -> " + name_of(r.to_node) + ": " + r.error;
      else if (r.rtt_ms && (!worst || *r.rtt_ms > *worst->rtt_ms))
        worst = &r;
    }
    if (!note) return;
    if (worst) {
      char ms[32];
      std::snprintf(ms, sizeof ms, "%.2f", *worst->rtt_ms);
      note("latency between nodes: slowest link " + name_of(worst->from_node) + " -> " +
           name_of(worst->to_node) + " " + ms + " ms (TCP connect to sshd)");
    }
    if (!errors.empty())
      note("latency between nodes: " + errors.substr(2) + " (the ranks may not reach each other)");
  } catch (const std::exception& e) {
    if (note) note(std::string("latency between nodes not measured: ") + e.what());
  }
}

// The link matrix among the run's nodes on its own transport (parallel.measure_links = auto),
// stored with the run so its communication efficiency is judged against the links it started
// with. Bounded (30 s); a failure is a note, never a refusal: the run starts either way.
static void note_links(db::Database& db, std::vector<Node>& nodes, int64_t run_id, const Note& note) {
  std::vector<LinkNode> refs;
  for (auto& n : nodes) refs.push_back({n.rec, n.session.get(), n.worker});
  LinkJobOptions job;
  job.timeout_s = 30;
  job.run_id = run_id;
  const LinkJobResult r = measure_links_on_nodes(db, refs, job);
  if (!note) return;
  if (r.measurement) {
    if (const auto s = slowest_link(db, *r.measurement))
      note("links between nodes (" + r.measurement->transport + "): slowest " + s->from + " -> " + s->to +
           " " + rate_text(s->bytes_per_s) + " (stored with the run; flotilla nodes links shows the matrix)");
  }
  for (const auto& p : r.problems) note("links between nodes: " + p);
}

void prepare_node(Node& node, const std::string& rid, const RunConfig& config,
                  const remote::DeployOptions& deploy, const Note& note) {
  remote::Session& s = *node.session;
  const remote::DeployResult d = remote::deploy_worker(s, deploy);
  node.worker = d.worker;
  if (note)
    note("node " + node.rec.name + ": worker " + d.dir + " (" + (d.reused ? "reused" : "uploaded") + ")");
  remote::upload_run_config(s, rid, config_to_toml(config));
  if (config.data.source != "synthetic") return;
  // The worker makes the synthetic corpus on global rank 0 only: one per node, made here.
  const auto& c = config;
  const std::string dir = remote::remote_run_dir(s, rid) + "/data/synthetic-v" +
                          std::to_string(c.model.vocab_size) + "-s" + std::to_string(c.run.seed) + "-n" +
                          std::to_string(c.data.synthetic_tokens);
  const remote::ExecResult r =
      s.exec_argv({d.worker, "data", "synth", "--out", dir, "--vocab", std::to_string(c.model.vocab_size),
                   "--tokens", std::to_string(c.data.synthetic_tokens), "--val-tokens",
                   std::to_string(std::max<int64_t>(c.data.synthetic_tokens / 10, 1)), "--seed",
                   std::to_string(c.run.seed)},
                  600);
  if (r.exit_status != 0)
    throw Error(ExitCode::kComm,
                "node " + node.rec.name + ": generating the synthetic corpus failed: " + r.err);
}

int random_master_port() {
  std::random_device rd;
  return 20000 + static_cast<int>(rd() % 12768);
}

Watch start_on_nodes(db::Database& db, std::vector<Node>& nodes, const StartRequest& req, const Note& note) {
  const int m = static_cast<int>(nodes.size());
  const int n = ranks_per_node(req.config, m, req.nproc_per_node);
  if (!req.existing_run) check_new_run_name(req.name);  // before any row, upload or process
  RunConfig config = req.config;
  config.run.name = req.name;
  if (req.max_restarts) config.run.max_restarts = *req.max_restarts;
  if (!req.from_checkpoint.empty()) config.checkpoint.resume = "auto";  // the uploaded one, in its run dir
  // A Hub name: config.json here for the shape, pinned to its commit; each node gets the weights.
  const std::string asked = config.model.init_from;
  resolve_model_source(config);
  validate_run_config(config, n * m);  // an invalid run starts nothing and leaves no row
  if (note && config.model.init_from != asked)
    note("model.init_from " + asked + " is " + config.model.init_from +
         " (its config.json read here; each node loads it from its own Hugging Face cache, or downloads it there)");
  check_remote_write_paths(config, m == 1 ? "node " + nodes[0].rec.name : "nodes");
  const RunLimits limits = limits_of(config, req.budget_usd);
  db::NewRun nr;
  nr.name = req.name;
  nr.config_toml = config_to_toml(config);
  nr.config_json = config_to_json(config, -1);
  nr.budget_usd = limits.max_usd;
  nr.budget_warn_fraction = limits.warn_fraction;
  nr.max_hours = limits.max_hours;
  nr.target.clear();  // "a,b": the nodes, the master first
  std::vector<std::string> names;
  for (const auto& node : nodes) {
    nr.target += (nr.target.empty() ? "" : ",") + node.rec.name;
    names.push_back(node.rec.name);
  }
  int64_t run_id = 0;
  db::write_tx(db, [&] {
    if (req.existing_run) {
      run_id = *req.existing_run;
      const db::Run was = db::get_run(db, run_id);
      db::set_run_config(db, run_id, nr.config_toml, nr.config_json);
      db::detach_node(db, run_id, db::ensure_node(db, "local", "local"));
      for (const db::SshNode& old : db::run_ssh_nodes(db, run_id)) db::detach_node(db, run_id, old.id);
      db::set_run_target(db, run_id, nr.target);
      // A cap set earlier (or edited in Costs) stays unless a new one is given.
      db::set_budget(db, run_id,
                     req.budget_usd               ? nr.budget_usd
                     : was.budget_usd.has_value() ? was.budget_usd
                                                  : nr.budget_usd,
                     was.budget_warn_fraction);
      db::add_event(db, run_id, db::now_seconds(), "moved", "info",
                    req.origin + ": moved from " + (was.target.empty() ? std::string("local") : was.target) +
                        " to " + nr.target +
                        (req.from_checkpoint.empty() ? "" : ", from " + req.from_checkpoint));
    } else if (req.fork_of) {
      run_id = db::fork_run(db, *req.fork_of, req.name);
      db::set_run_config(db, run_id, nr.config_toml, nr.config_json);
      db::set_run_target(db, run_id, nr.target);
      db::set_budget(db, run_id, nr.budget_usd, nr.budget_warn_fraction);
      db::set_max_hours(db, run_id, nr.max_hours);
    } else {
      run_id = db::create_run(db, nr);
    }
    for (const auto& node : nodes) db::attach_node(db, run_id, node.rec.id, n);
    const RunPrice price = resolve_run_price(db, run_id, config);
    check_budget_is_priced(price, limits, req.name, names);  // throws: the whole row is rolled back
    db::set_run_price(db, run_id, price.usd_per_hour, price.source, price.shares);
  });
  const std::string rid = remote_id(req.name, run_id);

  int master_port = req.master_port.value_or(0);
  if (master_port == 0) master_port = random_master_port();
  remote::RemoteRunSpec spec;
  spec.run_id = rid;
  spec.nnodes = m;
  spec.nproc_per_node = n;
  spec.master_addr = nodes[0].rec.host;
  spec.master_port = master_port;
  spec.launch_args = {"--max-restarts", std::to_string(config.run.max_restarts)};
  if (req.no_bind) spec.launch_args.push_back("--no-bind");
  spec.allow_restart = req.existing_run.has_value();  // an earlier stint there left its folder

  remote::DeployOptions deploy;
  deploy.worker_path = req.worker_path;
  deploy.version = req.version;
  for (auto& node : nodes) prepare_node(node, rid, config, deploy, note);
  if (!req.from_checkpoint.empty()) {
    const std::string at = remote::upload_checkpoint(*nodes[0].session, rid, req.from_checkpoint);
    if (note)
      note("node " + nodes[0].rec.name + ": the run starts from " + req.from_checkpoint + " (now " + at +
           ")");
  }
  if (m > 1) note_latency(db, nodes, note);
  if (m > 1 && config.parallel.measure_links == "auto") note_links(db, nodes, run_id, note);
  db::set_run_dir(db, run_id, nodes[0].rec.name + ":" + remote::remote_run_dir(*nodes[0].session, rid));
  // Models by name, made ready on every node in its own cache before any rank starts (after the run
  // dir is recorded, so a run stopped or failed here is resumed like any other: the fetch goes on).
  try {
    std::vector<ModelFetchTarget> targets;
    for (auto& node : nodes) targets.push_back({node.session.get(), node.worker, "node " + node.rec.name});
    for (const std::string& line : fetch_models(targets, rid, config, note, req.cancelled))
      db::add_event(db, run_id, db::now_seconds(), "model", "info", line);
  } catch (const std::exception& e) {
    const auto* err = dynamic_cast<const Error*>(&e);
    RunEnd end;
    end.status = err && err->code() == ExitCode::kPreempted ? db::RunStatus::kStopped : db::RunStatus::kFailed;
    end.note = e.what();
    end.reason = req.origin + ": " + end.note;
    end.exit_code = -1;
    try {
      record_end(db, run_id, end);
    } catch (const std::exception&) {
      // The original error says more than a second one would.
    }
    throw;
  }

  remote::RemoteRunStatus started;
  for (int r = m - 1; r >= 0; --r) {
    spec.worker = nodes[static_cast<size_t>(r)].worker;
    spec.node_rank = r;
    started = remote::start_remote_run(*nodes[static_cast<size_t>(r)].session, spec);
  }
  const double start_time =
      started.started_at > 0 ? static_cast<double>(started.started_at) : db::now_seconds();

  Watch w;
  w.run_id = run_id;
  w.name = req.name;
  w.rid = rid;
  w.total_steps = config.train.steps;
  const std::string why = req.origin + ": " + std::to_string(m) + " node(s) x " + std::to_string(n) +
                          " rank(s), master " + spec.master_addr + ":" + std::to_string(master_port);
  w.on_attach = [=](db::Database& wdb) { record_running(wdb, run_id, start_time, why); };
  return w;
}

bool is_node_run_dir(const std::string& run_dir) {
  const auto colon = run_dir.find(':');
  return colon != std::string::npos && colon > 0 && run_dir.find('/') == colon + 1;
}

std::string attach_target(db::Database& db, const db::Run& run, std::vector<Node>& nodes, std::string& rid,
                          bool resuming) {
  // run_dir is "<master node>:<absolute dir on it>" (set before any rank starts).
  const auto colon = run.run_dir.find(':');
  if (!is_node_run_dir(run.run_dir))
    return "run " + run.name + " is not a run on SSH nodes (run dir '" + run.run_dir +
           "'); nothing to attach to";
  const std::string master = run.run_dir.substr(0, colon);
  rid = run.run_dir.substr(run.run_dir.rfind('/') + 1);
  if (const std::string why = remote::validate_run_id(rid); !why.empty())
    throw db::DbError(db::DbErrorKind::kInvalid, "run " + run.name + ": the stored run dir '" + run.run_dir +
                                                     "' does not name a remote run directory: " + why);
  const bool terminal =
      run.status == db::RunStatus::kCompleted ||
      (!resuming && (run.status == db::RunStatus::kFailed || run.status == db::RunStatus::kStopped));
  if (terminal)
    return "run " + run.name + " already ended (" + db::to_string(run.status) + "); nothing to attach to";
  nodes.clear();
  nodes.push_back(Node{db::get_ssh_node(db, master), nullptr, ""});
  for (db::SshNode& rec : db::run_ssh_nodes(db, run.id))
    if (rec.name != master) nodes.push_back(Node{std::move(rec), nullptr, ""});
  return "";
}

Watch attach_watch(const db::Run& run, std::vector<Node>& nodes, const std::string& rid,
                   const std::string& origin, std::string& refusal, bool& still_running) {
  const remote::RemoteRunStatus st = with_reconnect(
      nodes[0], nullptr, [&](remote::Session& s) { return remote::remote_run_status(s, rid); });
  refusal.clear();
  still_running = st.state == remote::RunState::kRunning;
  Watch w;
  if (st.state == remote::RunState::kNotStarted) {
    refusal = "run " + run.name + " was never started on node " + nodes[0].rec.name + " (~/.flotilla/runs/" +
              rid + "); nothing to attach to";
    return w;
  }
  w.run_id = run.id;
  w.name = run.name;
  w.rid = rid;
  try {
    w.total_steps = parse_config_toml(run.config_toml, "run " + run.name).train.steps;
  } catch (const Error&) {
    w.total_steps = 0;  // progress then shows step N/0; the run is watched all the same
  }
  // Costs: a run the store still has as running keeps its open accruals (opened at the real start
  // on the node), so the time nobody watched is charged once, with no gap. A run halted in the
  // store (e.g. marked preempted) while its ranks kept going resumes charging from where it was
  // halted, never from now.
  if (run.status != db::RunStatus::kRunning) {
    const double since = run.ended_at.value_or(run.started_at.value_or(static_cast<double>(st.started_at)));
    w.on_attach = [id = run.id, since, origin](db::Database& wdb) {
      const db::Run now = db::get_run(wdb, id);
      if (db::transition_allowed(now.status, db::RunStatus::kRunning))
        record_running(wdb, id, since, origin + ": the run is still going");
    };
  }
  return w;
}

NodesPlace::NodesPlace(std::vector<Node>& nodes, Watch w, const Note& note, const Recovery* recovery)
    : nodes_(nodes),
      w_(std::move(w)),
      note_(note),
      recovery_(recovery && recovery->enabled ? recovery : nullptr) {
  if (recovery_) {
    spares_ = recovery_->spares;
    // A lost master is given up after about the settle time (then the nodes are asked), not
    // after the minute of backoff a plain watcher allows.
    w_.reconnect = {0.5, 2, std::max(1.0, recovery_->settle_seconds / 3), 4};
    w_.mirror_dir = recovery_->mirror_dir;
  }
}

std::string NodesPlace::source() const { return "ssh:" + nodes_[0].rec.name + ":metrics.jsonl"; }

void NodesPlace::begin(db::Writer* writer) {
  if (w_.on_attach && writer) writer->run(w_.on_attach);
  newest_checkpoint_ = mirrored_ = 0;
  sample_.assign(nodes_.size(), w_.gpu_sample_seconds > 0);
  last_gpus_ = Clock::now() - std::chrono::hours(1);
  last_status_ = Clock::now() - std::chrono::seconds(10);
  final_exit_ = -1;
  final_ended_at_ = 0;
}

MetricsChunk NodesPlace::read(uint64_t offset) {
  const remote::TailChunk t = with_reconnect(
      nodes_[0], note_, [&](remote::Session& s) { return remote::tail_run_file(s, w_.rid, offset); },
      w_.reconnect);
  MetricsChunk c;
  c.start = offset;
  c.end = t.lines.empty() ? offset : t.offset;
  for (const auto& l : t.lines) (c.text += l) += '\n';
  return c;
}

void NodesPlace::stored(const std::vector<MetricsRecord>& records) {
  for (const MetricsRecord& e : records)
    if (e.type == MetricsRecordType::kCheckpoint)
      newest_checkpoint_ = std::max(newest_checkpoint_, e.checkpoint().step);
  mirror();
}

// With a mirror dir, each new checkpoint of the master is copied here once committed in the store,
// so a run can resume elsewhere when the master itself is lost (recover()).
void NodesPlace::mirror() {
  if (w_.mirror_dir.empty() || newest_checkpoint_ <= mirrored_) return;
  const int64_t step = newest_checkpoint_;
  try {
    std::filesystem::create_directories(w_.mirror_dir);
    remote::fetch_remote_checkpoint(*nodes_[0].session, w_.rid, step, w_.mirror_dir);
    mirrored_ = step;
    std::vector<std::filesystem::path> kept;
    for (const auto& e : std::filesystem::directory_iterator(w_.mirror_dir))
      if (e.is_directory() && e.path().filename().string().rfind("step-", 0) == 0 &&
          e.path().filename().string().find('.') == std::string::npos)
        kept.push_back(e.path());
    std::sort(kept.begin(), kept.end());
    for (size_t i = 0; i + 2 < kept.size(); ++i) std::filesystem::remove_all(kept[i]);  // the newest two stay
  } catch (const std::exception& e) {
    if (note_) note_("mirroring the checkpoint at step " + std::to_string(step) + " failed: " + e.what());
    mirrored_ = step;  // not retried: the next checkpoint is
  }
}

void NodesPlace::stop(StopCause cause, const std::string& why, const Note& note) {
  if (note)
    note((why.empty() ? std::string("the run was deleted from the store") : why) +
         ": stopping the run on every node (checkpoint, then exit)");
  // Who asked, for the workers' words (engine/core/stop_request.h): a Stop or a budget, not the system.
  nlohmann::json asked;
  asked["cause"] = cause == StopCause::kBudget ? "budget" : "stop";
  asked["note"] = cause == StopCause::kBudget ? why : std::string("on request");
  asked["by"] = "flotilla";
  const std::string request = asked.dump();
  for (auto& node : nodes_) {
    try {
      with_reconnect(node, note,
                     [&](remote::Session& s) { return remote::stop_remote_run(s, w_.rid, 30, request); });
    } catch (const Error& e) {
      if (note) note("stopping node " + node.rec.name + " failed: " + e.what());
    }
  }
}

void NodesPlace::checkpoint(bool stopping, const Note& note) {
  if (stopping) return;
  try {
    const bool asked = with_reconnect(
        nodes_[0], note, [&](remote::Session& s) { return remote::request_remote_checkpoint(s, w_.rid); },
        w_.reconnect);
    if (note)
      note(asked ? "checkpoint requested on node " + nodes_[0].rec.name + ": it is written at the next step"
                 : "no checkpoint: the run is not running on node " + nodes_[0].rec.name);
  } catch (const remote::ConnectionLost&) {
    throw;
  } catch (const Error& e) {
    if (note) note(std::string("asking for a checkpoint failed: ") + e.what());
  }
}

// Every few seconds, each node's GPUs into system_samples (the Live page's per-node GPU plot).
// A node without nvidia-smi is not asked again; a failed reading never disturbs the watch.
void NodesPlace::sample_gpus(db::Writer* writer) {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (!sample_[i] || !nodes_[i].session || !nodes_[i].session->connected()) continue;
    try {
      const remote::ExecResult r = nodes_[i].session->exec(kGpuQuery, 10);
      if (r.exit_status == 127 || r.out.find("flotilla:no-nvidia-smi") != std::string::npos) {
        sample_[i] = false;
        continue;
      }
      if (r.exit_status != 0) continue;
      const std::vector<db::SystemSample> samples =
          samples_from_gpus(nodes_[i].rec.id, remote::parse_nvidia_smi_csv(r.out), db::now_seconds());
      if (!samples.empty() && writer)
        writer->run([samples](db::Database& wdb) { db::insert_system_samples(wdb, samples); });
    } catch (const Error&) {
      // a lost link is the tail's business (it reconnects); the next sample simply comes later
    }
  }
}

bool NodesPlace::turn(const Turn&, db::Writer* writer, const Note& note) {
  const auto now = Clock::now();
  if (w_.gpu_sample_seconds > 0 && now - last_gpus_ >= std::chrono::duration<double>(w_.gpu_sample_seconds)) {
    last_gpus_ = now;
    sample_gpus(writer);
  }
  if (now - last_status_ < std::chrono::seconds(1)) return false;
  last_status_ = now;
  const remote::RemoteRunStatus st = with_reconnect(
      nodes_[0], note, [&](remote::Session& s) { return remote::remote_run_status(s, w_.rid); },
      w_.reconnect);
  if (st.state != remote::RunState::kExited) return false;
  final_exit_ = st.exit_code;
  final_ended_at_ = st.ended_at;
  return true;
}

PlaceEnd NodesPlace::end(const EndContext& c, db::Writer*, const Note& note) {
  PlaceEnd e;
  e.exit_code = final_exit_ >= 0 ? final_exit_ : 1;
  // The other nodes end with node 0; record how they ended (a stuck one is stopped).
  // A node that no longer answers (a preempted spot node) is reported, not waited for.
  for (size_t i = 1; i < nodes_.size(); ++i) {
    Node& node = nodes_[i];
    remote::RemoteRunStatus st;
    try {
      const auto status = [&] {
        try {
          return remote::remote_run_status(*node.session, w_.rid);
        } catch (const remote::ConnectionLost&) {
          node.session->reconnect({0.5, 2, 2, 2});
          return remote::remote_run_status(*node.session, w_.rid);
        }
      };
      const auto until = Clock::now() + std::chrono::seconds(30);
      do {
        st = status();
        if (st.state != remote::RunState::kRunning) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(250));
      } while (Clock::now() < until);
      if (st.state == remote::RunState::kRunning) st = remote::stop_remote_run(*node.session, w_.rid, 10);
    } catch (const Error& err) {
      if (note) note("node " + node.rec.name + " no longer answers: " + err.what());
      continue;
    }
    if (st.exit_code != 0 && note)
      note("node " + node.rec.name + " ended with exit " + std::to_string(st.exit_code) +
           " (~/.flotilla/runs/" + w_.rid + "/stdout.log there)");
  }
  e.end = end_for_exit(e.exit_code, 0, c.cause, "node " + nodes_[0].rec.name, c.stop_note);
  e.end.at = static_cast<double>(final_ended_at_);
  return e;
}

std::string NodesPlace::lost_note(const std::string& what) const {
  return "lost node " + nodes_[0].rec.name + " and could not reconnect: " + what +
         "\nThe run may still be going on the nodes; it stays 'running' in the store.";
}

int watch_node_run(db::Writer& writer, std::vector<Node>& nodes, const Watch& w, const WatchHooks& hooks) {
  NodesPlace place(nodes, w, hooks.note);
  return watch_place(place, &writer, w.run_id, w.name, hooks).exit_code;
}

}  // namespace flotilla::runs
