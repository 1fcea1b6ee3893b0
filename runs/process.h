// The worker process of a local run: start it, recognise it again later, signal it and its ranks.
//
// Decision: a worker is recognised by its pid AND its start time (field 22 of /proc/PID/stat), as
// written to <run dir>/worker.pid when it starts ("PID STARTTIME\n"), so a pid the kernel has
// since given to another process is never taken for the worker, never signalled, and a run
// whose worker is gone is told apart from one whose worker is merely unwatched. The worker runs in
// a session of its own (setsid): no terminal's Ctrl-C or hang-up reaches it, only what its
// supervisor sends; its stdout and stderr go to <run dir>/worker.log, never a pipe, so nothing
// can kill it by closing one.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/error.h"

namespace flotilla::runs {

inline constexpr char kWorkerPidFile[] = "worker.pid";
inline constexpr char kWorkerLogFile[] = "worker.log";
inline constexpr char kMetricsFile[] = "metrics.jsonl";

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0]: the executable (an absolute path)
  std::string run_dir;            // worker.log and worker.pid go here (created when missing)
  // The worker's working directory, which relative paths in its config resolve against: the
  // user's folder for `flotilla run`; "" = run_dir (the app, which has no meaningful one).
  std::string working_dir;
  std::vector<std::string> env;  // extra KEY=VALUE entries
  // SIGTERM to the worker when the thread that spawned it ends (prctl PR_SET_PDEATHSIG): the
  // `flotilla run` terminal command, whose worker should checkpoint and stop when it is killed.
  // The app leaves it off: closing the app may leave a run running.
  bool stop_with_parent = false;
};

// A start refused because processes of an earlier group still use the run folder
// (engine/core/run_lock.h): their pids, and a message that starts "still has live processes".
struct RunFolderBusy : Error {
  RunFolderBusy(const std::string& message, std::vector<pid_t> users)
      : Error(ExitCode::kUsage, message), pids(std::move(users)) {}
  std::vector<pid_t> pids;
};

// The live processes of an earlier group in run_dir (its lock is held: a launch, ranks, even
// orphaned ones), pids when this user may see them; nullopt when none lives.
std::optional<std::vector<pid_t>> live_group(const std::string& run_dir);
// "still has live processes (pids 12, 34) writing to DIR: ... wait for them ... or end them".
std::string live_group_text(const std::string& run_dir, const std::vector<pid_t>& pids);

// Forks and execs the worker as described above and writes worker.pid. Throws RunFolderBusy when
// an earlier group still lives in the folder (the worker inherits the folder's lock, shared), and
// flotilla::Error (kIo) naming the folder or the executable when it cannot start (the folder is
// not writable, the executable cannot be run: the child's exec failure is reported back through a
// pipe).
pid_t spawn_worker(const SpawnOptions& options);

// Field 22 of /proc/PID/stat (start time in clock ticks since boot); "" when the process is gone
// or a zombie.
std::string process_start_time(pid_t pid);
// Writes <run_dir>/worker.pid for `pid` (with its start time).
void write_pid_file(const std::string& run_dir, pid_t pid);
// The pid in <run_dir>/worker.pid when that process is alive (not a zombie) with the recorded
// start time; 0 otherwise (no file, the process is gone, or the pid was reused).
pid_t live_worker_pid(const std::string& run_dir);
// Whether `pid` is alive (not a zombie) and has `start_time` ("" accepts any).
bool process_alive(pid_t pid, const std::string& start_time = "");

// The processes whose parent is `pid` (the ranks of a `launch` supervisor).
std::vector<pid_t> child_pids(pid_t pid);
// SIGKILL to `pid` and to the process groups its children lead (launch cannot pass SIGKILL on:
// its ranks, each in a group of its own, are found before it dies and ended with it).
void kill_worker_tree(pid_t pid);

// The last `max_lines` lines of <run_dir>/worker.log (at most 4 KiB read), oldest first.
std::vector<std::string> worker_log_tail(const std::string& run_dir, int max_lines);

// The worker's own last error in <run_dir>/worker.log, in its words without the program's prefix
// ("data.val: shard ...: 930 tokens are too few for one batch ..."; the line the worker prints as
// "flotilla-worker train: data error: ..." when a command fails); "" when there is none.
std::string worker_error_message(const std::string& run_dir);

}  // namespace flotilla::runs
