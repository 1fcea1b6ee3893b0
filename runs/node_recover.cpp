// Automatic recovery of a run on SSH nodes after a preemption (see noderun_core.h, supervise_run).
//
// Decision: recovery keeps the world size. A preempted spot node takes its ranks with it, but the
// checkpoint on the master was written by dp*tp*pp ranks and only loads into the same layout, so
// the lost node's ranks go to a spare, or, without one, are spread over the nodes that remain
// (2 nodes x 1 rank become 1 node x 2 ranks). The worker does the rest: started again in the same
// run dir it resumes from its newest verified checkpoint (checkpoint.resume = auto) and appends to
// the same metrics.jsonl, so the tail continues at its committed offset and a re-run step simply
// replaces its row. Which nodes are gone is decided by asking them after a settle time, not by
// exit codes: on a collective stop every rank exits with the preempted code, the preempted node's
// and the healthy ones' alike.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "db/errors.h"
#include "db/run_records.h"
#include "db/run_store.h"
#include "engine/config/config_io.h"
#include "engine/core/error.h"
#include "remote/remote_run.h"
#include "runs/node_models.h"
#include "runs/node_place.h"
#include "runs/node_run.h"
#include "runs/pricing.h"
#include "runs/run_status.h"

namespace flotilla::runs {
namespace {

using Clock = std::chrono::steady_clock;

// True when the node still answers (one quick reconnect allowed).
bool answers(Node& n) {
  try {
    if (n.session->connected() && n.session->exec("true", 5).exit_status == 0) return true;
  } catch (const Error&) {
  }
  try {
    n.session->reconnect({0.5, 2, 2, 2});
    return n.session->exec("true", 5).exit_status == 0;
  } catch (const Error&) {
    return false;
  }
}

// Sleeps `seconds` in slices; false when the caller asked to stop or leave meanwhile.
bool settle(double seconds, const WatchHooks& hooks) {
  const auto until = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < until) {
    if ((hooks.stop_requested && hooks.stop_requested()) ||
        (hooks.leave_requested && hooks.leave_requested()))
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return true;
}

std::string names(const std::vector<Node>& nodes) {
  std::string out;
  for (const auto& n : nodes) out += (out.empty() ? "" : ",") + n.rec.name;
  return out;
}

// The newest complete step-NNNNNNNN folder in `dir` ("" when none, or no dir).
std::string newest_mirrored(const std::string& dir) {
  std::string best;
  std::error_code ec;
  if (dir.empty()) return best;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string leaf = e.path().filename().string();
    if (e.is_directory() && leaf.size() == 13 && leaf.rfind("step-", 0) == 0 &&
        leaf.find_first_not_of("0123456789", 5) == std::string::npos && e.path().string() > best)
      best = e.path().string();
  }
  return best;
}

// The largest node count <= available that splits `world` ranks evenly.
int usable_nodes(int world, int available) {
  for (int k = std::min(world, available); k > 1; --k)
    if (world % k == 0) return k;
  return 1;
}

}  // namespace

std::string recovery_policy_json(const RecoveryPolicy& policy) {
  return nlohmann::json{{"auto", policy.enabled},
                        {"spares", policy.spares},
                        {"max", policy.max_recoveries},
                        {"after", policy.settle_seconds},
                        {"mirror", policy.mirror}}
      .dump();
}

RecoveryPolicy recovery_policy_from_json(const std::string& fields_json) {
  RecoveryPolicy p;
  const nlohmann::json j = nlohmann::json::parse(fields_json, nullptr, false);
  if (!j.is_object()) return p;
  if (j.contains("auto") && j["auto"].is_boolean()) p.enabled = j["auto"].get<bool>();
  if (j.contains("spares") && j["spares"].is_array())
    for (const auto& v : j["spares"])
      if (v.is_string() && !v.get<std::string>().empty()) p.spares.push_back(v.get<std::string>());
  if (j.contains("max") && j["max"].is_number()) p.max_recoveries = std::max(0, j["max"].get<int>());
  if (j.contains("after") && j["after"].is_number())
    p.settle_seconds = std::max(0.0, j["after"].get<double>());
  if (j.contains("mirror") && j["mirror"].is_boolean()) p.mirror = j["mirror"].get<bool>();
  return p;
}

void record_recovery_policy(db::Database& db, int64_t run_id, const RecoveryPolicy& policy) {
  std::string text = policy.enabled ? "automatic recovery on" : "automatic recovery off";
  if (policy.enabled && !policy.spares.empty())
    text += " (spares " + [&] {
      std::string s;
      for (const auto& n : policy.spares) s += (s.empty() ? "" : ",") + n;
      return s;
    }() + ")";
  db::add_event(db, run_id, db::now_seconds(), kRecoveryPolicyEvent, "info", text,
                recovery_policy_json(policy));
}

RecoveryPolicy stored_recovery_policy(const db::Database& db, int64_t run_id) {
  RecoveryPolicy policy;
  int done = 0;
  for (const db::EventInfo& e : db::list_events(db, run_id)) {
    if (e.kind == kRecoveryPolicyEvent) policy = recovery_policy_from_json(e.fields_json);
    if (e.kind == "recovery" && e.level == "warning" && e.message.rfind("automatic recovery", 0) == 0) ++done;
  }
  policy.max_recoveries = std::max(0, policy.max_recoveries - done);
  return policy;
}

std::string restart_on_nodes(db::Writer& writer, std::vector<Node>& nodes, Watch& w, const Recovery& recovery,
                             std::vector<db::SshNode>& spares, const std::string& label, bool require_loss,
                             const Note& note) {
  db::Database db(writer.path());
  const db::Run run = db::get_run(db, w.run_id);
  // Which nodes remain. The master holds the checkpoints: without it there is nothing to resume.
  std::vector<bool> alive(nodes.size());
  std::vector<std::string> lost;
  for (size_t i = 0; i < nodes.size(); ++i) {
    alive[i] = nodes[i].session && answers(nodes[i]);
    if (!alive[i]) lost.push_back(nodes[i].rec.name);
  }
  if (require_loss && lost.empty()) return "every node still answers: the run failed for another reason";
  // The master holds the checkpoints; without it only a mirrored copy lets the run go on.
  const std::string mirrored = newest_mirrored(recovery.mirror_dir);
  if (!alive[0] && mirrored.empty())
    return "run " + w.name + ": the master node " + nodes[0].rec.name +
           " does not answer and it holds the run's checkpoints" +
           (recovery.mirror_dir.empty()
                ? std::string(" (start runs with --mirror-checkpoints to survive this)")
                : std::string(" (none was mirrored yet)")) +
           "; resume the run with `flotilla runs resume " + w.name + "` once it is back";
  const bool new_master = !alive[0];
  const std::vector<int64_t> before = [&] {
    std::vector<int64_t> ids;
    for (const auto& n : nodes) ids.push_back(n.rec.id);
    return ids;
  }();
  std::vector<Node> kept;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (alive[i]) kept.push_back(std::move(nodes[i]));
  const RunConfig config = parse_config_toml(run.config_toml, "run " + w.name);
  int world = config.parallel.dp * config.parallel.tp * config.parallel.pp;
  if (world < 1) world = 1;

  // Replacements for the lost nodes, as far as spares allow (an unusable spare is skipped).
  std::vector<Node> added;
  while (kept.size() + added.size() < before.size() && !spares.empty()) {
    Node spare{spares.front(), nullptr, ""};
    spares.erase(spares.begin());
    if (!recovery.options) break;
    spare.session = std::make_unique<remote::Session>(recovery.options(spare.rec));
    try {
      spare.session->connect();
      added.push_back(std::move(spare));
    } catch (const Error& e) {
      if (note) note("spare node " + spare.rec.name + " cannot be used: " + e.what());
    }
  }
  const int available = static_cast<int>(kept.size() + added.size());
  const int count = usable_nodes(world, available);
  std::vector<Node> next;
  for (auto& n : kept)
    if (static_cast<int>(next.size()) < count) next.push_back(std::move(n));
  for (auto& n : added)
    if (static_cast<int>(next.size()) < count) next.push_back(std::move(n));
  const int per_node = world / count;
  // Whatever happens next, `nodes` holds the connected nodes this function still has.
  const auto keep = [&] { nodes = std::move(next); };

  remote::DeployOptions deploy;
  deploy.worker_path = recovery.worker_path;
  deploy.version = recovery.version;
  try {
    // A re-attached watcher knows no worker path yet: the old master only needs its bundle (its
    // run dir is complete), any other node the whole preparation (reused where present).
    if (next[0].worker.empty() && !new_master)
      next[0].worker = remote::deploy_worker(*next[0].session, deploy).worker;
    for (size_t i = 0; i < next.size(); ++i)
      if (next[i].worker.empty()) prepare_node(next[i], w.rid, config, deploy, note);
    // A model by name: in each node's cache (a replacement node fetches it now).
    std::vector<ModelFetchTarget> targets;
    for (auto& n : next) targets.push_back({n.session.get(), n.worker, "node " + n.rec.name});
    for (const std::string& line : fetch_models(targets, w.rid, config, note))
      db::add_event(db, w.run_id, db::now_seconds(), "model", "info", line);
  } catch (const Error& e) {
    keep();
    return "run " + w.name + ": preparing a node failed: " + e.what();
  }
  // The newest committed checkpoint the workers will resume from (none: from the start); a new
  // master gets the mirrored one first.
  std::string from;
  try {
    if (new_master) {
      const std::string dest = remote::upload_checkpoint(*next[0].session, w.rid, mirrored);
      from = "from the mirrored checkpoint at step " +
             std::to_string(std::atoll(mirrored.c_str() + mirrored.rfind("step-") + 5));
      db::set_run_dir(db, w.run_id, next[0].rec.name + ":" + remote::remote_run_dir(*next[0].session, w.rid));
      if (note)
        note("node " + next[0].rec.name + " is the new master; the mirrored checkpoint is at " + dest);
    } else {
      const std::vector<remote::RemoteCheckpoint> ckpts =
          remote::list_remote_checkpoints(*next[0].session, w.rid);
      from = ckpts.empty() ? std::string("from the start (no checkpoint was written)")
                           : "from the checkpoint at step " + std::to_string(ckpts.back().step);
    }
  } catch (const Error& e) {
    keep();
    return "run " + w.name + ": preparing the checkpoint on " + next[0].rec.name + " failed: " + e.what();
  }

  // The store: dropped nodes stop accruing, the new layout is recorded before anything starts.
  for (const int64_t id : before)
    if (std::none_of(next.begin(), next.end(), [&](const Node& n) { return n.rec.id == id; }))
      db::detach_node(db, w.run_id, id);
  for (const auto& n : next) db::attach_node(db, w.run_id, n.rec.id, per_node);
  db::set_run_target(db, w.run_id, names(next));
  price_run(db, w.run_id, config);  // the run's price on its new nodes, charged from the restart
  std::string lost_text = lost.empty() ? "no node lost" : "lost";
  for (size_t i = 0; i < lost.size(); ++i) lost_text += (i ? "," : " ") + lost[i];
  const std::string why = label + " (" + lost_text + "): " + std::to_string(count) + " node(s) x " +
                          std::to_string(per_node) + " rank(s) on " + names(next) + ", " + from;
  db::add_event(db, w.run_id, db::now_seconds(), "recovery", "warning", why);
  if (note) note(why);

  remote::RemoteRunSpec spec;
  spec.run_id = w.rid;
  spec.nnodes = count;
  spec.nproc_per_node = per_node;
  spec.master_addr = next[0].rec.host;
  spec.master_port = random_master_port();  // a fresh one: the old rendezvous may linger
  spec.allow_restart = true;
  spec.launch_args = {"--max-restarts", std::to_string(config.run.max_restarts)};
  if (recovery.no_bind) spec.launch_args.push_back("--no-bind");
  remote::RemoteRunStatus started;
  try {
    for (int r = count - 1; r >= 0; --r) {
      spec.worker = next[static_cast<size_t>(r)].worker;
      spec.node_rank = r;
      started = remote::start_remote_run(*next[static_cast<size_t>(r)].session, spec);
    }
  } catch (const Error& e) {
    keep();
    return "run " + w.name + ": starting the ranks again failed: " + e.what();
  }
  keep();
  const double start_time =
      started.started_at > 0 ? static_cast<double>(started.started_at) : db::now_seconds();
  const int64_t run_id = w.run_id;
  w.total_steps = config.train.steps;
  w.on_attach = [run_id, start_time, why](db::Database& wdb) {
    record_running(wdb, run_id, start_time, why);
  };
  return "";
}

bool NodesPlace::recover(db::Writer& writer, int code, const WatchHooks& hooks) {
  if (!recovery_) return false;
  const Recovery& recovery = *recovery_;
  const Note& note = hooks.note;
  db::Database db(writer.path());
  const db::Run run = db::get_run(db, w_.run_id);
  // Preempted (not stopped by request or by the budget), or failed on a communication error,
  // which is what a node that vanished without notice leaves behind (recovered only when a node
  // turns out to be gone).
  const bool preempted =
      code == static_cast<int>(ExitCode::kPreempted) && run.status == db::RunStatus::kPreempted;
  const bool comm_failure = code == static_cast<int>(ExitCode::kComm) && run.status == db::RunStatus::kFailed;
  // The watch lost the master for good (the run stays 'running' in the store).
  const bool master_lost = code == static_cast<int>(ExitCode::kComm) && run.status == db::RunStatus::kRunning;
  if (!preempted && !comm_failure && !master_lost) return false;
  if (master_lost) {
    RunEnd lost;
    lost.status = db::RunStatus::kPreempted;
    lost.note = "master node " + nodes_[0].rec.name + " lost";
    lost.reason = "node watcher: " + lost.note;
    record_end(db, w_.run_id, lost);
  }
  const auto give_up = [&](const std::string& why) {
    db::add_event(db, w_.run_id, db::now_seconds(), "recovery", "error", why);
    if (note) note(why);
    return false;
  };
  if (recovered_ >= recovery.max_recoveries)
    return give_up("run " + w_.name + " was preempted again after " + std::to_string(recovered_) +
                   " automatic recoveries (the limit); resume it with `flotilla runs resume " + w_.name +
                   "`");
  if (note)
    note("run " + w_.name +
         (preempted     ? " was preempted"
          : master_lost ? " lost its master node"
                        : " lost a rank's connection") +
         "; recovering automatically in " + std::to_string(static_cast<int>(recovery.settle_seconds)) +
         " s (which nodes remain is checked then)");
  if (!settle(recovery.settle_seconds, hooks)) return false;
  const std::string label =
      "automatic recovery " + std::to_string(recovered_ + 1) + "/" + std::to_string(recovery.max_recoveries);
  ++recovered_;
  const std::string why = restart_on_nodes(writer, nodes_, w_, recovery, spares_, label, comm_failure, note);
  if (!why.empty()) {
    if (!preempted && why.rfind("every node still answers", 0) == 0) return false;
    return give_up(why);
  }
  return true;
}

int supervise_node_run(db::Writer& writer, std::vector<Node>& nodes, Watch w, const WatchHooks& hooks,
                       const Recovery& recovery) {
  NodesPlace place(nodes, std::move(w), hooks.note, &recovery);
  return watch_place(place, &writer, place.run_id(), place.run_name(), hooks).exit_code;
}

}  // namespace flotilla::runs
