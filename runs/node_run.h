// A run on SSH nodes: start it (connect, deploy, upload, start every node's ranks), watch it (tail
// rank 0's metrics into the store by committed offset until node 0's worker exits), re-attach to
// it and recover it after a preemption; shared by `flotilla run --nodes`, `flotilla runs attach`
// and `runs resume`, and the app's RemoteRun.
//
// Decision: db/ and remote/ never include each other, so the glue that needs both lives in the
// runs layer, above them and below app/ and ui/; everything the callers do differently
// (printing, the stop request, leaving the run to a later watcher) comes in as the plain hooks of
// watch.h polled on the watching thread, so the CLI and the app write exactly the same rows in the
// same transactions. The status goes through run_status.h, the price through pricing.h, the
// budget through watch.h's guard, as for a local run.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "db/ingest.h"
#include "db/nodes.h"
#include "db/run_store.h"
#include "db/writer.h"
#include "engine/config/run_config.h"
#include "remote/deploy.h"
#include "remote/session.h"
#include "runs/ssh_options.h"
#include "runs/watch.h"

namespace flotilla::runs {

struct Node {
  db::SshNode rec;
  std::unique_ptr<remote::Session> session;
  std::string worker;  // the deployed flotilla-worker path on the node
};

using SessionOptionsFor = std::function<remote::SessionOptions(const db::SshNode&)>;

// Connects every node (strict host keys). On a HostKeyError calls `refused(node, error)` and
// returns false before anything runs anywhere (S3).
bool connect_nodes(std::vector<Node>& nodes, const SessionOptionsFor& options,
                   const std::function<void(const std::string&, const remote::HostKeyError&)>& refused);
// The same with the one set of SSH options (ssh_options.h); a refused host key throws Refusal in
// the access's words. Returns true.
bool connect_nodes(std::vector<Node>& nodes, const SshAccess& access);

// What watching a started run needs besides its connected nodes (node 0 = the master).
struct Watch {
  int64_t run_id = 0;
  std::string name, rid;  // the store's run name; the remote run directory's name
  int64_t total_steps = 0;
  std::function<void(db::Database&)> on_attach;  // run on the writer before tailing
  double gpu_sample_seconds = 5;             // every node's GPUs into system_samples this often (0: never)
  remote::Backoff reconnect{0.5, 2, 10, 8};  // how long a lost master is tried again
  std::string mirror_dir;                    // "": off; else each new checkpoint of the master is copied here
};

struct StartRequest {
  RunConfig config;  // run.name is replaced by `name`
  std::string name;
  std::optional<double> budget_usd;   // --budget: overrides budget.max_usd
  std::optional<int> max_restarts;    // --max-restarts: overrides run.max_restarts
  std::optional<int> nproc_per_node;  // default: dp*tp*pp / nodes
  std::optional<int> master_port;     // default: picked
  bool no_bind = false;
  std::string worker_path;                      // the local flotilla-worker to deploy
  std::string version;                          // the bundle's version folder
  std::string origin = "flotilla run --nodes";  // the status reason's prefix
  // A fork: the parent run (recorded as such) and the checkpoint folder on this machine the new run
  // starts from (uploaded to the master's run dir before any rank starts).
  std::optional<int64_t> fork_of;
  std::string from_checkpoint;
  // A halted stored run moving here from another place (resume elsewhere): its row is reused (config,
  // nodes, target, price replaced; an event says so) instead of a new one; from_checkpoint is its
  // newest checkpoint.
  std::optional<int64_t> existing_run;
  // Polled while the nodes fetch a model by name (node_models.h): true stops the fetches and the
  // start (the run is recorded stopped; `runs resume` goes on). May be empty.
  std::function<bool()> cancelled;
};

// Splits dp*tp*pp over `nodes`; throws flotilla::Error (kConfig) naming the numbers when it cannot.
int ranks_per_node(const RunConfig& config, int nodes, std::optional<int> requested);

// Deploys the worker on a connected node (reused when present), uploads the run config as
// <run dir>/run.toml and makes the synthetic corpus there when the config uses it.
void prepare_node(Node& node, const std::string& rid, const RunConfig& config,
                  const remote::DeployOptions& deploy, const Note& note);

// Validates the config (flotilla::Error kConfig, nothing created), creates the store row (target
// "a,b", node attachments, its price and limits: a budget on unpriced nodes is refused before
// anything starts, DbError kInvalid naming the fix), deploys, uploads the config, makes the
// synthetic corpus on every node, records run_dir "<node 0>:<dir>" and starts the ranks, last node
// first, with launch --max-restarts from run.max_restarts. `nodes` must be connected. Returns the
// Watch for watch_node_run (its on_attach records the run as running from node 0's own start
// time). `note` gets progress lines.
Watch start_on_nodes(db::Database& db, std::vector<Node>& nodes, const StartRequest& request,
                     const Note& note);
// A random rendezvous port for the master node, 20000-32767: below Linux's ephemeral range
// (32768-60999 by default), where any outgoing connection of the master, even one closed a minute
// ago (TIME_WAIT), holds a port the store then cannot bind (the master exits 7, "port ... already
// in use"). Used at the first start and at every recovery restart (the old rendezvous may linger).
int random_master_port();

// True when a stored run dir is "<master node>:/<absolute dir there>", i.e. the run is on SSH nodes
// (a local run dir is an absolute path and never has a ':' before its first '/').
bool is_node_run_dir(const std::string& run_dir);

// Why `run` cannot be re-attached ("" when it can): not on nodes, ended, or a bad run dir.
// On success fills `nodes` (unconnected, the master first) and `rid`.
// With `resuming`, a run that ended stopped, failed or preempted is accepted too (not completed).
std::string attach_target(db::Database& db, const db::Run& run, std::vector<Node>& nodes, std::string& rid,
                          bool resuming = false);
// The Watch for re-attaching `run` (its nodes connected): "" in `refusal` unless the run was never
// started on node 0.
Watch attach_watch(const db::Run& run, std::vector<Node>& nodes, const std::string& rid,
                   const std::string& origin, std::string& refusal, bool& still_running);

// Watches until node 0's worker exits (hooks: watch.h; a stop or a reached budget stops every
// node); records the final status (completed / stopped / preempted / failed, ended at node 0's
// recorded exit) and returns node 0's exit status; ExitCode::kComm when node 0 is lost for good
// (the run stays 'running'); kLeft when leave_requested.
int watch_node_run(db::Writer& writer, std::vector<Node>& nodes, const Watch& w, const WatchHooks& hooks);

// Automatic recovery after a preemption: what the watcher may do on its own (off by default).
struct Recovery {
  bool enabled = false;
  int max_recoveries = 3;            // preemptions recovered at most (user stops never count)
  double settle_seconds = 20;        // wait after the preemption before asking which nodes remain
  std::vector<db::SshNode> spares;   // replacement nodes, in order of preference
  SessionOptionsFor options;         // connects the spares
  std::string worker_path, version;  // the bundle deployed on a replacement
  bool no_bind = false;
  // "": the master must survive. Else checkpoints are mirrored here while watching, and a lost
  // master is replaced: the newest mirrored checkpoint is uploaded to the new master.
  std::string mirror_dir;
};

// A run's choice about preemptions as recorded in the store, so whoever re-attaches (the app, or
// `flotilla runs attach`) recovers as the starter asked: an event of kind "recovery-policy" with
// fields {"auto": bool, "spares": [names], "max": int, "after": seconds, "mirror": bool}.
inline constexpr const char* kRecoveryPolicyEvent = "recovery-policy";
struct RecoveryPolicy {
  bool enabled = false;
  std::vector<std::string> spares;
  int max_recoveries = 3;
  double settle_seconds = 20;
  bool mirror = false;  // checkpoints mirrored to the workspace (a lost master is survivable)
};
std::string recovery_policy_json(const RecoveryPolicy& policy);
// Missing or malformed fields keep their defaults; negative numbers become 0.
RecoveryPolicy recovery_policy_from_json(const std::string& fields_json);
void record_recovery_policy(db::Database& db, int64_t run_id, const RecoveryPolicy& policy);
// The newest recorded policy less the automatic recoveries already done; off when none recorded.
RecoveryPolicy stored_recovery_policy(const db::Database& db, int64_t run_id);

// watch_node_run, then, while the run ends 'preempted' (its worker exited with the preempted code and
// nobody asked it to stop) and `recovery` allows: waits settle_seconds, drops the nodes that no
// longer answer, puts spares in their place or spreads their ranks over the remaining nodes
// (dp*tp*pp is kept, so the checkpoint's layout still fits), and starts every rank again, which
// resumes from the newest verified checkpoint in the master's run dir. The same store row goes
// preempted -> running, with an event per recovery; costs stop for dropped nodes and start for
// replacements. The master must remain: it holds the checkpoints. Returns like watch_node_run.
int supervise_node_run(db::Writer& writer, std::vector<Node>& nodes, Watch w, const WatchHooks& hooks,
                       const Recovery& recovery);

// One restart of a halted run (preempted, stopped, failed) on its nodes: the step supervise_node_run
// repeats, and `flotilla runs resume` of a run on nodes. `nodes` (the master first) may hold
// unconnected sessions: nodes that do not answer are dropped and replaced from `spares` (consumed)
// or their ranks spread over the rest. `label` starts the recorded event ("automatic recovery
// 1/3"); with requireLoss it refuses when every node still answers. Returns "" and sets
// `nodes` to the run's new nodes and `w` (total_steps, on_attach: running from the new start),
// else why not (nothing was started).
std::string restart_on_nodes(db::Writer& writer, std::vector<Node>& nodes, Watch& w, const Recovery& recovery,
                             std::vector<db::SshNode>& spares, const std::string& label, bool require_loss,
                             const Note& note);

}  // namespace flotilla::runs
