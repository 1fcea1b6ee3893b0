// A user's own command (a cloud CLI call that stops or starts a rented node), run on this machine
// as a list of arguments: never through a shell, never with text from a remote host.
//
// Decision: the executable is looked up on PATH here, in the parent (so a missing program is told
// before anything runs, and the child between fork and exec makes only async-signal-safe calls:
// setpgid, dup2, execv). The child gets stdin from /dev/null, this process's environment, a process
// group of its own (a timeout kills the whole group) and no other descriptor of ours. Its stdout
// and stderr go through a pipe that a reader thread drains, keeping the first and last 32 KiB: a
// chatty or runaway command can neither block on a full pipe nor fill the disk with its log, and
// a command that leaves a daemon holding the pipe open is not waited for beyond its own exit.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace flotilla::runs {

struct CommandOutcome {
  bool ok = false;       // exited with status 0
  int exit_status = -1;  // when it exited
  int signal = 0;        // when a signal ended it (a timeout: SIGKILL)
  bool timed_out = false;
  std::string output;       // its stdout and stderr, at most ~64 KiB (the middle left out)
  std::string description;  // "exit status 1", "killed after the 120 s timeout", "not found on PATH"
};

// `argv[0]` as it will be run: the path itself when it has a '/', else the first executable
// regular file of that name on $PATH; "" when there is none.
std::string find_on_path(const std::string& program);

// How a command is shown in messages: its arguments separated by spaces, each one that is empty
// or holds a space, a quote, a shell character or a control byte single-quoted (control bytes
// escaped as \xNN). For reading only: it is never run.
std::string command_text(const std::vector<std::string>& argv);

class ArgvCommand {
 public:
  ArgvCommand() = default;
  // A command still running is killed (its group) and reaped.
  ~ArgvCommand();
  ArgvCommand(const ArgvCommand&) = delete;
  ArgvCommand& operator=(const ArgvCommand&) = delete;

  // Starts `argv` (argv[0] looked up on PATH). `log_path` ("": none) receives the output when it
  // ends. False with `why` ("'gcloud' was not found on PATH", "cannot run /x: Permission denied")
  // when it could not start; nothing then runs.
  bool start(const std::vector<std::string>& argv, double timeout_s, const std::string& log_path,
             std::string* why);
  bool running() const { return pid_ > 0; }
  // Non-blocking: empty while it runs (past the timeout its group is killed first).
  std::optional<CommandOutcome> poll();
  // Blocks until it ends (or its timeout kills it).
  CommandOutcome wait();

 private:
  struct Reader;
  CommandOutcome finish(int status);
  pid_t pid_ = 0;
  std::chrono::steady_clock::time_point deadline_{};
  double timeout_s_ = 0;
  bool killed_ = false;
  std::string log_path_;
  std::shared_ptr<Reader> reader_;
  std::thread reader_thread_;
};

}  // namespace flotilla::runs
