// A run on SSH nodes without any Qt: start it (connect, deploy, upload, start every node's ranks)
// and watch it (tail rank 0's metrics into the store by committed offset until node 0's worker
// exits), shared by `flotilla run --nodes` / `flotilla runs attach` and the app's RemoteRun.
//
// Decision: db/ and remote/ never include each other, and app/ is above ui/, so the glue that
// needs both lives here, Qt-free; everything the two callers do differently (printing, the stop
// request, leaving the run to a later watcher) comes in as plain callbacks polled on the watching
// thread, so the CLI and the app write exactly the same rows in the same transactions.
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
#include "db/sql.h"
#include "engine/config/run_config.h"
#include "remote/deploy.h"
#include "remote/session.h"

namespace flotilla::ui::noderun {

struct Node {
  db::SshNode rec;
  std::unique_ptr<remote::Session> session;
  std::string worker;  // the deployed flotilla-worker path on the node
};

using SessionOptionsFor = std::function<remote::SessionOptions(const db::SshNode&)>;
using Note = std::function<void(const std::string&)>;

// Connects every node (strict host keys). On a HostKeyError calls `refused(node, error)` and
// returns false before anything runs anywhere (S3).
bool connectNodes(std::vector<Node>& nodes, const SessionOptionsFor& options,
                  const std::function<void(const std::string&, const remote::HostKeyError&)>& refused);

// What watching a started run needs besides its connected nodes (node 0 = the master).
struct Watch {
  int64_t runId = 0;
  std::string name, rid;  // the store's run name; the remote run directory's name
  int64_t totalSteps = 0;
  std::optional<double> budgetUsd;
  std::function<void(db::Database&)> onAttach;  // run on the writer before tailing
  double gpuSampleSeconds = 5;  // every node's GPUs into system_samples this often (0: never)
  remote::Backoff reconnect{0.5, 2, 10, 8};  // how long a lost master is tried again
  std::string mirrorDir;  // "": off; else each new checkpoint of the master is copied here
};

struct StartRequest {
  RunConfig config;                    // run.name is replaced by `name`
  std::string name;
  std::optional<double> budgetUsd;
  std::optional<int> nprocPerNode;     // default: dp*tp*pp / nodes
  std::optional<int> masterPort;       // default: picked
  bool noBind = false;
  std::string workerPath;              // the local flotilla-worker to deploy
  std::string version;                 // the bundle's version folder
  std::string origin = "flotilla run --nodes";  // the status reason's prefix
};

// Splits dp*tp*pp over `nodes`; throws flotilla::Error (kConfig) naming the numbers when it cannot.
int ranksPerNode(const RunConfig& config, int nodes, std::optional<int> requested);

// Deploys the worker on a connected node (reused when present), uploads the run config as
// <run dir>/run.toml and makes the synthetic corpus there when the config uses it.
void prepareNode(Node& node, const std::string& rid, const RunConfig& config, const remote::DeployOptions& deploy,
                 const Note& note);

// Creates the store row (target "a,b", node attachments), deploys, uploads the config, makes the
// synthetic corpus on every node, records run_dir "<node 0>:<dir>" and starts the ranks, last
// node first. `nodes` must be connected. Returns the Watch for watchRun (its onAttach records the
// run as running from node 0's own start time). `note` gets progress lines.
Watch startOnNodes(db::Database& db, std::vector<Node>& nodes, const StartRequest& request, const Note& note);
// A random rendezvous port for the master node, 20000-32767: below Linux's ephemeral range
// (32768-60999 by default), where any outgoing connection of the master, even one closed a minute
// ago (TIME_WAIT), holds a port the store then cannot bind (the master exits 7, "port ... already
// in use"). Used at the first start and at every recovery restart (the old rendezvous may linger).
int randomMasterPort();

// True when a stored run dir is "<master node>:/<absolute dir there>", i.e. the run is on SSH nodes
// (a local run dir is an absolute path and never has a ':' before its first '/').
bool isNodeRunDir(const std::string& runDir);

// Why `run` cannot be re-attached ("" when it can): not on nodes, ended, or a bad run dir.
// On success fills `nodes` (unconnected, the master first) and `rid`.
// With `resuming`, a run that ended stopped, failed or preempted is accepted too (not completed).
std::string attachTarget(db::Database& db, const db::Run& run, std::vector<Node>& nodes, std::string& rid,
                         bool resuming = false);
// The Watch for re-attaching `run` (its nodes connected): "" in `refusal` unless the run was never
// started on node 0.
Watch attachWatch(const db::Run& run, std::vector<Node>& nodes, const std::string& rid, const std::string& origin,
                  std::string& refusal, bool& stillRunning);

struct WatchHooks {
  Note note;                                            // connection losses, stops, node endings
  std::function<void(const db::IngestEvent&)> onRecord;  // each parsed record (before commit)
  // After each commit: the raw lines just stored and the byte offset they end at.
  std::function<void(const std::vector<std::string>&, uint64_t)> onCommitted;
  std::function<bool()> stopRequested;    // polled: true once -> stop every node, keep watching
  std::function<bool()> checkpointRequested;  // polled: true -> a checkpoint now (SIGUSR1 to node 0)
  std::function<bool()> leaveRequested;   // polled: true -> return kLeft, the run stays running
};

inline constexpr int kLeft = -2;  // watchRun gave the run up (left running, still 'running')

// Watches until node 0's worker exits; records the final status (completed / stopped / preempted
// / failed, ended at node 0's recorded exit) and returns node 0's exit status; ExitCode::kComm
// when node 0 is lost for good (the run stays 'running'); kLeft when leaveRequested.
int watchRun(const std::string& dbPath, std::vector<Node>& nodes, const Watch& w, const WatchHooks& hooks);

// Automatic recovery after a preemption: what the watcher may do on its own (off by default).
struct Recovery {
  bool enabled = false;
  int maxRecoveries = 3;             // preemptions recovered at most (user stops never count)
  double settleSeconds = 20;         // wait after the preemption before asking which nodes remain
  std::vector<db::SshNode> spares;   // replacement nodes, in order of preference
  SessionOptionsFor options;         // connects the spares
  std::string workerPath, version;   // the bundle deployed on a replacement
  bool noBind = false;
  // "": the master must survive. Else checkpoints are mirrored here while watching, and a lost
  // master is replaced: the newest mirrored checkpoint is uploaded to the new master.
  std::string mirrorDir;
};

// A run's choice about preemptions as recorded in the store, so whoever re-attaches (the app, or
// `flotilla runs attach`) recovers as the starter asked: an event of kind "recovery-policy" with
// fields {"auto": bool, "spares": [names], "max": int, "after": seconds, "mirror": bool}.
inline constexpr const char* kRecoveryPolicyEvent = "recovery-policy";
struct RecoveryPolicy {
  bool enabled = false;
  std::vector<std::string> spares;
  int maxRecoveries = 3;
  double settleSeconds = 20;
  bool mirror = false;  // checkpoints mirrored to the workspace (a lost master is survivable)
};
std::string recoveryPolicyJson(const RecoveryPolicy& policy);
// Missing or malformed fields keep their defaults; negative numbers become 0.
RecoveryPolicy recoveryPolicyFromJson(const std::string& fieldsJson);
void recordRecoveryPolicy(db::Database& db, int64_t runId, const RecoveryPolicy& policy);
// The newest recorded policy less the automatic recoveries already done; off when none recorded.
RecoveryPolicy storedRecoveryPolicy(const db::Database& db, int64_t runId);

// watchRun, then, while the run ends 'preempted' (its worker exited with the preempted code and
// nobody asked it to stop) and `recovery` allows: waits settleSeconds, drops the nodes that no
// longer answer, puts spares in their place or spreads their ranks over the remaining nodes
// (dp*tp*pp is kept, so the checkpoint's layout still fits), and starts every rank again, which
// resumes from the newest verified checkpoint in the master's run dir. The same store row goes
// preempted -> running, with an event per recovery; costs stop for dropped nodes and start for
// replacements. The master must remain: it holds the checkpoints. Returns like watchRun.
int superviseRun(const std::string& dbPath, std::vector<Node>& nodes, Watch w, const WatchHooks& hooks,
                 const Recovery& recovery);

// One restart of a halted run (preempted, stopped, failed) on its nodes: the step superviseRun
// repeats, and `flotilla runs resume` of a run on nodes. `nodes` (the master first) may hold
// unconnected sessions: nodes that do not answer are dropped and replaced from `spares` (consumed)
// or their ranks spread over the rest. `label` starts the recorded event ("automatic recovery
// 1/3"); with requireLoss it refuses when every node still answers. Returns "" and sets
// `nodes` to the run's new nodes and `w` (totalSteps, onAttach: running from the new start),
// else why not (nothing was started).
std::string restartOnNodes(const std::string& dbPath, std::vector<Node>& nodes, Watch& w, const Recovery& recovery,
                           std::vector<db::SshNode>& spares, const std::string& label, bool requireLoss,
                           const Note& note);

}  // namespace flotilla::ui::noderun
