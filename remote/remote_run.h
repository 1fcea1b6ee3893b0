// One node's share of a run, started detached on the node and watched over SSH.
//
// Layout on the node: ~/.flotilla/runs/<run-id>/ holds run.toml (the config the app uploaded),
// and, written by the start script and its wrapper: run.lock (flock), pid (the wrapper's pid,
// which is also its session id), worker.pid, started_at (epoch seconds), stdout.log, exit_code;
// the worker itself writes metrics.jsonl, train.log, config.toml and checkpoints/ (docs/worker.md).
//
// Decision: the lock, not the pid file, says whether a run is alive. The start script takes an
// exclusive flock on run.lock and the detached wrapper (setsid nohup) inherits it, as do the
// worker and its ranks; the kernel releases it only when the last of them exits, so a reused pid,
// a dead wrapper with live ranks, or two app instances racing to start cannot fool it (S5). The
// wrapper writes exit_code when the worker ends. Every argument is validated and single-quoted
// (S8); the scripts themselves are constants. Blocking: call from a worker thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "remote/session.h"

namespace flotilla::remote {

struct RemoteRunSpec {
  std::string run_id;       // validate_run_id(): letters, digits, '.', '_', '-'; no leading '-' or '.'
  std::string worker;       // the deployed worker on the node (DeployResult::worker)
  std::string config_path;  // the run config on the node ("" = <run dir>/run.toml)
  int nnodes = 1;
  int node_rank = 0;
  int nproc_per_node = 1;
  std::string master_addr = "127.0.0.1";  // validate_host()
  int master_port = 29500;
  std::vector<std::string> launch_args;  // extra `launch` flags, e.g. {"--max-restarts", "2"}
  std::vector<std::string> train_args;   // extra `train` flags, e.g. {"--set", "train.steps=10"}
  std::vector<std::string> env;          // "NAME=value" for the run; NAME is [A-Za-z_][A-Za-z0-9_]*
  bool allow_restart = false;            // start again in a run dir whose previous start has exited (resume)
};

enum class RunState { kNotStarted, kRunning, kExited };

struct RemoteRunStatus {
  RunState state = RunState::kNotStarted;
  long pid = 0;            // the wrapper (= session id of every process of the run)
  int exit_code = -1;      // kExited: the worker's exit code; -1 unknown (the wrapper was killed)
  int64_t started_at = 0;  // epoch seconds of the start on the node (costs accrue from here)
  int64_t ended_at = 0;    // kExited: epoch seconds the wrapper recorded the exit (0 unknown)
};

// Refused by start_remote_run (S5): the run is alive, or was started before and allow_restart is off.
class RunAlreadyStarted : public Error {
 public:
  RunAlreadyStarted(const std::string& m, RemoteRunStatus status)
      : Error(ExitCode::kUsage, m), status_(status) {}
  const RemoteRunStatus& status() const { return status_; }

 private:
  RemoteRunStatus status_;
};

struct TailChunk {
  std::vector<std::string> lines;  // complete lines, without their '\n'
  uint64_t offset = 0;             // where the next read starts (just past the last complete line)
  bool file_missing = false;       // nothing written yet
};

struct RemoteCheckpoint {
  int64_t step = 0;
  std::string name;  // step-NNNNNNNN
};

// "" when `run_id` may name a remote run directory, else why not.
std::string validate_run_id(std::string_view run_id);

// Absolute ~/.flotilla/runs/<run-id> on the node.
std::string remote_run_dir(Session& session, const std::string& run_id);

// Writes the run config to <run dir>/run.toml (atomic, verified); returns its absolute path.
std::string upload_run_config(Session& session, const std::string& run_id, const std::string& toml_text);

// Starts `<worker> launch ... -- train --config C --out-dir <run dir> <train_args>` detached.
// Throws RunAlreadyStarted (S5), Error(kUsage) for an invalid field, Error(kComm) otherwise.
RemoteRunStatus start_remote_run(Session& session, const RemoteRunSpec& spec);

RemoteRunStatus remote_run_status(Session& session, const std::string& run_id);

// New complete lines of <run dir>/<file> from byte `offset` (at most max_bytes read). A torn last
// line is not returned; the returned offset stops before it, so the next call picks it up whole.
TailChunk tail_run_file(Session& session, const std::string& run_id, uint64_t offset,
                        const std::string& file = "metrics.jsonl", size_t max_bytes = 4u << 20);

// SIGTERM to the wrapper (forwarded to the worker, which checkpoints and exits 10), wait up to
// grace_s, then SIGKILL to every process of the run's session. Returns the final status.
// `stop_request`: written first as the run folder's stop.request (engine/core/stop_request.h: the
// worker words its end from it: a Stop, a budget); "" writes none (the stop is the system's).
RemoteRunStatus stop_remote_run(Session& session, const std::string& run_id, double grace_s = 30,
                                const std::string& stop_request = "");

// SIGUSR1 to the node's `launch` (which forwards it to its ranks; every rank agrees at the next
// step boundary, so asking node 0 is enough): a checkpoint now, training goes on. False when the
// run is not running there.
bool request_remote_checkpoint(Session& session, const std::string& run_id);

// Committed checkpoints in <run dir>/checkpoints, oldest first.
std::vector<RemoteCheckpoint> list_remote_checkpoints(Session& session, const std::string& run_id);

// Downloads checkpoint `step` into <local_dir>/step-NNNNNNNN (files written to a .part folder,
// then renamed); returns the local path.
std::string fetch_remote_checkpoint(Session& session, const std::string& run_id, int64_t step,
                                    const std::string& local_dir);

// Uploads a local checkpoint folder (<...>/step-NNNNNNNN, e.g. one fetch_remote_checkpoint wrote)
// into <run dir>/checkpoints/ on the node: every file checksum-verified into a side folder, then
// renamed into place, so a resume there sees it whole or not at all. Returns the remote path.
std::string upload_checkpoint(Session& session, const std::string& run_id, const std::string& local_step_dir);

}  // namespace flotilla::remote
