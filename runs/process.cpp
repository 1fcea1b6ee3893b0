// The worker process of a local run (see process.h for the pid + start time decision).
#include "runs/process.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "engine/core/error.h"
#include "engine/core/run_lock.h"

namespace flotilla::runs {
namespace {

// The fields of /proc/PID/stat from field 3 (state) on; empty when the process is gone.
std::vector<std::string> proc_stat(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');  // the command name may hold spaces and parentheses
  std::vector<std::string> out;
  if (close == std::string::npos || close + 2 > text.size()) return out;
  std::istringstream fields(text.substr(close + 2));
  for (std::string field; fields >> field;) out.push_back(field);
  return out;
}

}  // namespace

std::string process_start_time(pid_t pid) {
  if (pid <= 0) return "";
  const std::vector<std::string> f = proc_stat(pid);
  if (f.size() < 20 || f[0] == "Z" || f[0] == "X") return "";
  return f[19];
}

bool process_alive(pid_t pid, const std::string& start_time) {
  const std::string now = process_start_time(pid);
  return !now.empty() && (start_time.empty() || now == start_time);
}

void write_pid_file(const std::string& run_dir, pid_t pid) {
  const std::string path = run_dir + "/" + kWorkerPidFile;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << pid << ' ' << process_start_time(pid) << '\n';
    if (!f) throw_io("cannot write " + tmp + ": " + errno_string(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw_io("cannot write " + path + ": " + errno_string(errno));
}

pid_t live_worker_pid(const std::string& run_dir) {
  std::ifstream f(run_dir + "/" + kWorkerPidFile);
  long pid = 0;
  std::string start;
  if (!(f >> pid) || pid <= 0) return 0;
  f >> start;
  return process_alive(static_cast<pid_t>(pid), start) ? static_cast<pid_t>(pid) : 0;
}

std::optional<std::vector<pid_t>> live_group(const std::string& run_dir) {
  std::error_code ec;
  if (run_dir.empty() || !std::filesystem::is_directory(run_dir, ec)) return std::nullopt;
  int fd = -1;
  try {
    fd = try_lock_run_folder(run_dir);
  } catch (const Error&) {
    return std::nullopt;  // no lock file can be made: no group can have started here either
  }
  if (fd >= 0) {
    ::close(fd);
    return std::nullopt;
  }
  return run_folder_users(run_dir);
}

std::string live_group_text(const std::string& run_dir, const std::vector<pid_t>& pids) {
  return "still has live processes (" +
         (pids.empty() ? std::string("they hold ") + run_dir + "/" + kRunLockFile
                       : std::string(pids.size() == 1 ? "pid " : "pids ") + pid_list_text(pids)) +
         ") writing to " + run_dir +
         ": ranks whose supervisor died stop at their next step, with a checkpoint; wait for them to exit, "
         "or end them (kill " +
         (pids.empty() ? std::string("PID") : pid_list_text(pids)) + ") and start again";
}

pid_t spawn_worker(const SpawnOptions& o) {
  if (o.argv.empty()) throw_usage("no worker command to start");
  std::error_code ec;
  std::filesystem::create_directories(o.run_dir, ec);
  // No second group in a folder an earlier one still writes to (its ranks may outlive a killed
  // launch): the lock is free only when none of its processes lives. Held shared from here on and
  // inherited by the worker (launch) and through it by every rank, so the folder stays in use
  // until the last of them exits.
  const int lock = try_lock_run_folder(o.run_dir);
  if (lock < 0) {
    const std::vector<pid_t> users = run_folder_users(o.run_dir);
    throw RunFolderBusy(live_group_text(o.run_dir, users), users);
  }
  ::flock(lock, LOCK_SH);
  const std::string log_path = o.run_dir + "/" + kWorkerLogFile;
  const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) {
    const int err = errno;
    ::close(lock);
    throw_io("cannot create the run folder's " + log_path + ": " + errno_string(err) +
             " (check that the folder is writable and the disk has space)");
  }
  const int null_in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  int report[2];  // the child writes errno here when exec fails; closed on a successful exec
  if (::pipe2(report, O_CLOEXEC) != 0) {
    ::close(log);
    ::close(lock);
    throw_io("cannot create a pipe: " + errno_string(errno));
  }
  // Everything the child needs is prepared before fork: between fork and exec only
  // async-signal-safe calls run (the app forks while other threads hold locks).
  std::vector<char*> args;
  for (const auto& a : o.argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_store;
  for (char** e = environ; *e; ++e) env_store.emplace_back(*e);
  for (const auto& e : o.env) env_store.push_back(e);
  std::vector<char*> envp;
  for (auto& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::string cwd = o.working_dir.empty() ? o.run_dir : o.working_dir;
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setsid();
    if (o.stop_with_parent) {
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) _exit(127);  // the parent died before the death signal was armed
    }
    if (null_in >= 0) ::dup2(null_in, 0);
    ::dup2(log, 1);
    ::dup2(log, 2);
    ::fcntl(lock, F_SETFD, 0);  // the one descriptor the worker keeps across exec
    if (::chdir(cwd.c_str()) != 0) {
      const int err = errno;
      ssize_t w = ::write(report[1], &err, sizeof err);
      (void)w;
      _exit(127);
    }
    // A worker started by a process that ignores SIGPIPE or blocks signals gets the defaults.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGUSR1}) ::sigaction(sig, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execve(args[0], args.data(), envp.data());
    const int err = errno;
    ssize_t w = ::write(report[1], &err, sizeof err);
    (void)w;
    _exit(127);
  }
  const int fork_errno = errno;
  ::close(report[1]);
  ::close(log);
  ::close(lock);  // the worker holds it now
  if (null_in >= 0) ::close(null_in);
  if (pid < 0) {
    ::close(report[0]);
    throw_io("cannot start the worker " + o.argv[0] + ": " + errno_string(fork_errno));
  }
  int child_errno = 0;
  ssize_t got;
  do {
    got = ::read(report[0], &child_errno, sizeof child_errno);
  } while (got < 0 && errno == EINTR);
  ::close(report[0]);
  if (got == static_cast<ssize_t>(sizeof child_errno)) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    throw_io("cannot start the worker " + o.argv[0] + " in " + o.run_dir + ": " + errno_string(child_errno) +
             " (reinstall Flotilla, or build the flotilla-worker target)");
  }
  write_pid_file(o.run_dir, pid);
  return pid;
}

std::vector<pid_t> child_pids(pid_t pid) {
  std::vector<pid_t> out;
  if (pid <= 0) return out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  const std::string parent = std::to_string(pid);
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long child = std::strtol(e->d_name, &end, 10);
    if (child <= 0 || *end != '\0') continue;
    const std::vector<std::string> f = proc_stat(static_cast<pid_t>(child));
    if (f.size() > 1 && f[1] == parent) out.push_back(static_cast<pid_t>(child));
  }
  ::closedir(d);
  return out;
}

void kill_worker_tree(pid_t pid) {
  if (pid <= 0) return;
  const std::vector<pid_t> ranks = child_pids(pid);
  ::kill(pid, SIGKILL);
  for (pid_t r : ranks) ::kill(-r, SIGKILL);
}

std::vector<std::string> worker_log_tail(const std::string& run_dir, int max_lines) {
  std::ifstream f(run_dir + "/" + kWorkerLogFile, std::ios::binary);
  std::vector<std::string> lines;
  if (!f) return lines;
  f.seekg(0, std::ios::end);
  const std::streamoff size = f.tellg();
  const std::streamoff window = 4096;
  f.seekg(size > window ? size - window : 0);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  if (size > window && !lines.empty()) lines.erase(lines.begin());  // cut mid-line
  if (static_cast<int>(lines.size()) > max_lines) lines.erase(lines.begin(), lines.end() - max_lines);
  return lines;
}

std::string worker_error_message(const std::string& run_dir) {
  const std::vector<std::string> lines = worker_log_tail(run_dir, 40);
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    const size_t at = it->find("flotilla-worker ");
    if (at == std::string::npos) continue;
    // "flotilla-worker CMD: NAME: message": NAME is an exit code's name (engine/cli/worker_main.cpp).
    const size_t cmd_end = it->find(": ", at);
    if (cmd_end == std::string::npos) continue;
    std::string rest = it->substr(cmd_end + 2);
    for (int code = 1; code <= static_cast<int>(ExitCode::kStalled); ++code) {
      const std::string name = std::string(exit_code_name(static_cast<ExitCode>(code))) + ": ";
      if (rest.rfind(name, 0) == 0) return rest.substr(name.size());
    }
    if (rest.rfind("internal error: ", 0) == 0) return rest.substr(16);
  }
  return {};
}

}  // namespace flotilla::runs
