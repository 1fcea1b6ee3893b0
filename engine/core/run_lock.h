// A run folder in use: while any process of a training group lives (launch, each rank, even ranks
// whose supervisor was killed), it holds a shared flock on <run dir>/worker.lock. Whoever starts
// or resumes a group in the folder first takes the lock exclusively, which fails while any of them
// is alive, so a second group never writes into a folder the first still writes to.
//
// Decision: a flock, not a pid file. The kernel drops a dead process's lock, so the answer is never
// stale, needs no cleanup after a crash, and covers processes no worker.pid names (orphaned ranks).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace flotilla {

inline constexpr char kRunLockFile[] = "worker.lock";

// Opens (creating) <dir>/worker.lock and takes a shared lock, retrying for a few seconds while a
// starter holds it exclusively for its check. Returns the descriptor, which the caller keeps open
// (O_CLOEXEC) for as long as its process is part of the group (unlocked where the file system has
// no flock). Throws Error(kIo) naming the file when it cannot be opened or created.
int hold_run_folder_shared(const std::string& dir);

// The same lock taken exclusively, without waiting: -1 when some process of a group holds it (see
// run_folder_users), else the descriptor (the caller converts or closes it; on a file system
// without flock it is not locked). Throws Error(kIo) when the file cannot be opened or created.
int try_lock_run_folder(const std::string& dir);

// The processes on this machine that have <dir>/worker.lock open (the group's live processes),
// found through /proc/PID/fd; ascending. Empty when none (or none this user may see).
std::vector<pid_t> run_folder_users(const std::string& dir);

// "12, 345" for the message of a refused start.
std::string pid_list_text(const std::vector<pid_t>& pids);

}  // namespace flotilla
