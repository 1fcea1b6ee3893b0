// Issue 16: the worker outlives whoever reads its stdout. `flotilla run` dying (the terminal
// closed, or kill -9) used to take the worker with it at its next stdout write (SIGPIPE), with no
// emergency checkpoint. Here: stdout (metrics mirrored on it) and stderr are pipes whose read ends
// are closed mid-run; the worker keeps training, metrics.jsonl keeps growing, and SIGHUP (a closed
// terminal) stops it like SIGTERM: a checkpoint, then exit 10. The same through `launch`, whose
// ranks inherit the ignored SIGPIPE and get the hang-up as the SIGTERM launch forwards.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "check.h"
#include "worker_run.h"

using namespace flotilla_test;

namespace {

const char* kConfig = R"(
[run]
name = "hangup"
threads = 1
[model]
preset = "custom"
n_layer = 2
n_head = 2
n_embd = 32
vocab_size = 128
max_seq_len = 32
[data]
synthetic_tokens = 30000
[train]
steps = 100000
micro_batch = 2
seq_len = 16
[checkpoint]
every = 1000
preempt_grace_s = 60
)";

// Starts argv with stdout and stderr on pipes; returns the pid and the read ends.
pid_t spawn_piped(const std::vector<std::string>& argv, int* out_read, int* err_read) {
  int out[2], err[2];
  if (pipe(out) != 0 || pipe(err) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(err[1], 2);
    close(out[0]);
    close(err[0]);
    putenv(const_cast<char*>("OMP_NUM_THREADS=1"));
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  *out_read = out[0];
  *err_read = err[0];
  return pid;
}

bool alive(pid_t pid) {
  int status = 0;
  return waitpid(pid, &status, WNOHANG) == 0;
}

void check_hangup_stops_with_checkpoint(const std::string& root, const std::string& name, bool via_launch) {
  const std::string cfg = root + "/" + name + ".toml", out = root + "/" + name;
  write_text(cfg, kConfig);
  std::vector<std::string> argv = {FLOTILLA_WORKER_PATH};
  if (via_launch)
    for (const char* a : {"launch", "--nproc-per-node", "1", "--master-port", "0", "--no-bind", "--"})
      argv.push_back(a);
  for (const std::string& a : {std::string("train"), std::string("--config"), cfg, std::string("--out-dir"), out})
    argv.push_back(a);
  int out_fd = -1, err_fd = -1;
  const pid_t pid = spawn_piped(argv, &out_fd, &err_fd);
  CHECK(pid > 0);
  char buf[4096];
  CHECK(read(out_fd, buf, sizeof buf) > 0);  // the stream has started
  CHECK(wait_until([&] { return last_step(out) >= 3; }, 60));
  // Whoever read the pipes is gone: nothing reads stdout or stderr any more.
  close(out_fd);
  close(err_fd);
  const int64_t at_close = last_step(out);
  CHECK_MSG(wait_until([&] { return last_step(out) >= at_close + 20; }, 60), "%s: stopped training at step %lld",
            name.c_str(), static_cast<long long>(last_step(out)));
  CHECK_MSG(alive(pid), "%s: the worker died once its stdout reader was gone", name.c_str());
  kill(pid, SIGHUP);
  const int code = wait_exit(pid);
  CHECK_MSG(code == 10, "%s: exit %d after SIGHUP, expected 10 (preempted, with a checkpoint)", name.c_str(), code);
  bool checkpointed = false, summarized = false;
  for (const auto& r : read_metrics(out)) {
    checkpointed |= r["type"] == "checkpoint" && r["reason"] == "preempted";
    summarized |= r["type"] == "summary" && r["exit"] == "preempted";
  }
  CHECK_MSG(checkpointed, "%s: no emergency checkpoint after SIGHUP", name.c_str());
  CHECK(summarized);
}

}  // namespace

int main() {
  const std::string root = fresh_dir("worker_hangup");
  check_hangup_stops_with_checkpoint(root, "train", false);
  check_hangup_stops_with_checkpoint(root, "launch", true);
  return summary("test_worker_hangup");
}
