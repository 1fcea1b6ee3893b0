// The launch supervisor (see launcher.h). One attempt = spawn every local rank, poll their
// stdout/stderr/heartbeat pipes and exits, end the group on the first failure or stall
// (SIGTERM, grace, SIGKILL of each rank's process group), and report the root cause.
#include "engine/launch/launcher.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/comm/socket_io.h"
#include "engine/comm/tcp_store.h"
#include "engine/core/error.h"
#include "engine/launch/gpu_pinning.h"

namespace flotilla {
namespace {

using Clock = std::chrono::steady_clock;

volatile sig_atomic_t g_supervisor_signal = 0;
void on_supervisor_signal(int sig) { g_supervisor_signal = sig; }
// SIGUSR1 ("checkpoint now") is counted, not latched: each one is forwarded to every live rank.
volatile sig_atomic_t g_checkpoint_requests = 0;
void on_checkpoint_signal(int) { g_checkpoint_requests = g_checkpoint_requests + 1; }

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Rank {
  int global = 0;
  int local = 0;
  pid_t pid = -1;
  int out_fd = -1, err_fd = -1, hb_fd = -1;
  std::string out_buf, err_buf, hb_buf;
  bool exited = false;
  int status = 0;
  int64_t step = 0;                 // last step from the heartbeat
  std::string collective;           // last in-flight collective from the heartbeat
  Clock::time_point last_progress;  // when `step` last advanced (or start)
  Clock::time_point last_beat;      // last heartbeat line of any kind
  bool beating = false;
  double slowest_step_s = 0;  // longest time between two advances after the first step
  // It reported that a peer closed its connection: its failure is a consequence of another rank's.
  bool peer_closed = false;
};

// The comm layer's words for a failure caused by a peer (engine/comm/gloo_ring.cpp, gloo_peer_watch.cpp).
bool says_peer_closed(const std::string& line) {
  return line.find("closed the connection") != std::string::npos;
}

std::string self_exe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw Error(ExitCode::kInternal, "cannot resolve /proc/self/exe");
  buf[n] = 0;
  return buf;
}

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Cores [first, first+count) of the online CPUs for local rank `local` of `n`.
void bind_to_share(int local, int n) {
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores < n) return;  // more ranks than cores: let the kernel schedule
  const long per = cores / n;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (long c = local * per; c < (local + 1) * per; ++c) CPU_SET(static_cast<int>(c), &set);
  sched_setaffinity(0, sizeof set, &set);
}

class Attempt {
 public:
  // store_fd: a listening socket on `port` for rank 0's store, or -1 (rank 0 binds the port).
  Attempt(const LaunchOptions& o, int restart, int port, int store_fd, const std::vector<int>& devices)
      : opt_(o), restart_(restart), port_(port), store_fd_(store_fd), devices_(devices) {}

  AttemptResult run() {
    spawn_all();
    AttemptResult result;
    const auto start = Clock::now();
    while (true) {
      poll_io(200);
      reap();
      if (g_checkpoint_requests != checkpoints_forwarded_) {
        checkpoints_forwarded_ = g_checkpoint_requests;
        log("launch: checkpoint requested (SIGUSR1), forwarding to all ranks");
        for (auto& r : ranks_)
          if (!r.exited) kill(r.pid, SIGUSR1);  // the rank itself, not its group's helpers
      }
      if (g_supervisor_signal != 0 && !forwarded_) {
        forwarded_ = true;
        log("launch: received signal %d, forwarding to all ranks (they checkpoint if the grace period "
            "allows)",
            g_supervisor_signal);
        for (auto& r : ranks_)
          if (!r.exited) kill(-r.pid, g_supervisor_signal == SIGINT ? SIGINT : SIGTERM);
        forward_time_ = Clock::now();
      }
      if (pick_root_cause(result)) break;
      if (std::all_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.exited; })) break;
      if (forwarded_) {
        if (seconds_since(forward_time_) > opt_.term_grace_s + 60) break;  // the ranks ignore us: kill below
        continue;
      }
      if (check_stall(result, start)) break;
    }
    end_group();
    drain();
    if (result.failed_rank < 0) {
      bool all_ok = true;
      for (const auto& r : ranks_) all_ok = all_ok && WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0;
      result.exit_code = all_ok ? 0 : static_cast<int>(ExitCode::kInternal);
      if (forwarded_) {
        result.exit_code = static_cast<int>(ExitCode::kPreempted);
        result.preempted = true;
        result.reason = "stopped by signal " + std::to_string(g_supervisor_signal);
      }
    }
    return result;
  }

 private:
  template <typename... A>
  void log(const char* fmt, A... args) {
    if (!opt_.log) return;
    std::fprintf(opt_.log, fmt, args...);
    std::fputc('\n', opt_.log);
    std::fflush(opt_.log);
  }

  void spawn_all() {
    const int world = opt_.nnodes * opt_.nproc_per_node;
    const std::string binary = opt_.worker_binary.empty() ? self_exe() : opt_.worker_binary;
    for (int local = 0; local < opt_.nproc_per_node; ++local) {
      Rank r;
      r.local = local;
      r.global = opt_.node_rank * opt_.nproc_per_node + local;
      int out[2], err[2], hb[2];
      if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 || pipe2(hb, O_CLOEXEC) != 0)
        throw_io("launch: cannot create pipes: " + errno_string(errno));
      const pid_t supervisor = getpid();
      const pid_t pid = fork();
      if (pid < 0) throw_io("launch: fork failed: " + errno_string(errno));
      if (pid == 0) {
        setpgid(0, 0);  // its own process group: ending the rank ends everything it started
        // A rank never outlives its supervisor (kill -9 of launch cannot forward anything): SIGTERM,
        // so it takes the preemption path, agreed by every rank at the next step boundary (a
        // checkpoint when the grace period allows, exit 10) rather than losing the steps since the
        // last save; the trainer's orphan watchdog (heartbeat.h) ends it if that does not finish.
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != supervisor) _exit(static_cast<int>(ExitCode::kPreempted));  // died before that
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGUSR1, SIG_IGN);  // until the trainer installs its handler (exec keeps SIG_IGN)
        dup2(out[1], 1);
        dup2(err[1], 2);
        dup2(hb[1], 3);  // dup2 clears O_CLOEXEC on the new descriptor
        if (store_fd_ >= 0 && r.global == 0) {
          if (store_fd_ == kStoreFd)
            fcntl(kStoreFd, F_SETFD, 0);
          else
            dup2(store_fd_, kStoreFd);
          setenv(comm::kStoreFdEnv, std::to_string(kStoreFd).c_str(), 1);
        }
        auto env = [](const char* k, const std::string& v) { setenv(k, v.c_str(), 1); };
        env("RANK", std::to_string(r.global));
        env("LOCAL_RANK", std::to_string(local));
        env("WORLD_SIZE", std::to_string(world));
        env("LOCAL_WORLD_SIZE", std::to_string(opt_.nproc_per_node));
        env("GROUP_RANK", std::to_string(opt_.node_rank));
        env("MASTER_ADDR", opt_.master_addr);
        env("MASTER_PORT", std::to_string(port_));
        env("FLOTILLA_HEARTBEAT_FD", "3");
        env("FLOTILLA_RESTART_COUNT", std::to_string(restart_));
        if (!devices_.empty()) env(kCudaDeviceEnv, std::to_string(devices_[static_cast<size_t>(local)]));
        if (opt_.bind_cores) {
          bind_to_share(local, opt_.nproc_per_node);
          if (!getenv("OMP_NUM_THREADS")) {
            const long cores = sysconf(_SC_NPROCESSORS_ONLN);
            env("OMP_NUM_THREADS", std::to_string(std::max(1L, cores / opt_.nproc_per_node)));
          }
        }
        std::vector<char*> argv;
        argv.push_back(const_cast<char*>(binary.c_str()));
        for (const auto& a : opt_.worker_args) argv.push_back(const_cast<char*>(a.c_str()));
        argv.push_back(nullptr);
        execv(binary.c_str(), argv.data());
        std::fprintf(stderr, "launch: cannot execute %s: %s\n", binary.c_str(), std::strerror(errno));
        _exit(127);
      }
      setpgid(pid, pid);  // also from the parent, so there is no race with kill(-pid)
      close(out[1]);
      close(err[1]);
      close(hb[1]);
      r.pid = pid;
      r.out_fd = out[0];
      r.err_fd = err[0];
      r.hb_fd = hb[0];
      set_nonblocking(r.out_fd);
      set_nonblocking(r.err_fd);
      set_nonblocking(r.hb_fd);
      r.last_progress = r.last_beat = Clock::now();
      ranks_.push_back(std::move(r));
    }
    log("launch: started %d rank(s) on node %d of %d (world %d, master %s:%d, attempt %d)",
        opt_.nproc_per_node, opt_.node_rank, opt_.nnodes, world, opt_.master_addr.c_str(), port_,
        restart_ + 1);
  }

  // stdout lines: metrics-protocol JSON passes through verbatim (it names its rank); anything else
  // is prefixed. stderr lines are prefixed "[rank R]". Heartbeat lines update progress.
  void handle_line(Rank& r, int which, const std::string& line) {
    if (which != 2 && says_peer_closed(line)) r.peer_closed = true;
    if (which == 0) {
      if (!line.empty() && line[0] == '{') {
        std::fwrite(line.data(), 1, line.size(), stdout);
        std::fputc('\n', stdout);
        std::fflush(stdout);
      } else if (opt_.log) {
        std::fprintf(opt_.log, "[rank %d] %s\n", r.global, line.c_str());
      }
    } else if (which == 1) {
      if (opt_.log) std::fprintf(opt_.log, "[rank %d] %s\n", r.global, line.c_str());
    } else {
      // "step=N coll=<text>"
      r.last_beat = Clock::now();
      r.beating = true;
      long long step = 0;
      if (std::sscanf(line.c_str(), "step=%lld", &step) == 1 && step > r.step) {
        // Per step, so a heartbeat that skipped some (several steps in one second) is not slow.
        if (r.step > 0)
          r.slowest_step_s =
              std::max(r.slowest_step_s, seconds_since(r.last_progress) / static_cast<double>(step - r.step));
        r.step = step;
        r.last_progress = Clock::now();
      }
      const auto c = line.find("coll=");
      r.collective = c == std::string::npos ? "" : line.substr(c + 5);
    }
  }

  bool pump(Rank& r, int which) {
    int& fd = which == 0 ? r.out_fd : which == 1 ? r.err_fd : r.hb_fd;
    std::string& buf = which == 0 ? r.out_buf : which == 1 ? r.err_buf : r.hb_buf;
    if (fd < 0) return false;
    char tmp[65536];
    bool any = false;
    while (true) {
      const ssize_t n = read(fd, tmp, sizeof tmp);
      if (n > 0) {
        any = true;
        buf.append(tmp, static_cast<size_t>(n));
        size_t pos;
        while ((pos = buf.find('\n')) != std::string::npos) {
          handle_line(r, which, buf.substr(0, pos));
          buf.erase(0, pos + 1);
        }
        continue;
      }
      if (n == 0) {  // EOF
        if (!buf.empty()) handle_line(r, which, buf);
        buf.clear();
        close(fd);
        fd = -1;
      }
      break;
    }
    return any;
  }

  void poll_io(int timeout_ms) {
    std::vector<pollfd> fds;
    for (auto& r : ranks_)
      for (int fd : {r.out_fd, r.err_fd, r.hb_fd})
        if (fd >= 0) fds.push_back({fd, POLLIN, 0});
    if (fds.empty()) {
      usleep(static_cast<useconds_t>(timeout_ms) * 1000);
      return;
    }
    poll(fds.data(), fds.size(), timeout_ms);
    for (auto& r : ranks_)
      for (int w = 0; w < 3; ++w) pump(r, w);
  }

  void drain() {
    for (int i = 0; i < 50; ++i) {
      bool open = false;
      for (auto& r : ranks_) open = open || r.out_fd >= 0 || r.err_fd >= 0 || r.hb_fd >= 0;
      if (!open) return;
      poll_io(20);
    }
    for (auto& r : ranks_)
      for (int* fd : {&r.out_fd, &r.err_fd, &r.hb_fd})
        if (*fd >= 0) {
          close(*fd);
          *fd = -1;
        }
  }

  void reap() {
    for (auto& r : ranks_) {
      if (r.exited) continue;
      int status = 0;
      const pid_t p = waitpid(r.pid, &status, WNOHANG);
      if (p == r.pid) {
        r.exited = true;
        r.status = status;
        pump(r, 0);
        pump(r, 1);
        pump(r, 2);
      }
    }
  }

  // Root cause: the first failed rank (in rank order) that failed on its own. A rank that failed because a
  // peer closed its connection is a consequence: wait up to 3 s for the rank that caused it to exit (a killed
  // or failing rank), and name the consequence only when no such rank shows up. True once a cause is named.
  bool pick_root_cause(AttemptResult& result) {
    const Rank* consequence = nullptr;
    bool all_exited = true;
    for (const auto& r : ranks_) {
      all_exited = all_exited && r.exited;
      if (!r.exited || (WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0)) continue;
      if (!r.peer_closed) {
        describe_failure(r, result);
        return true;
      }
      if (!consequence) consequence = &r;
    }
    if (!consequence) return false;
    if (!consequence_since_) consequence_since_ = Clock::now();
    if (!all_exited && seconds_since(*consequence_since_) < 3.0) return false;
    describe_failure(*consequence, result);
    return true;
  }

  void describe_failure(const Rank& r, AttemptResult& res) {
    res.failed_rank = r.global;
    res.last_step = r.step;
    res.last_collective = r.collective;
    if (WIFSIGNALED(r.status)) {
      res.signal = WTERMSIG(r.status);
      res.reason = "rank " + std::to_string(r.global) + " killed by signal " + std::to_string(res.signal) +
                   " (" + strsignal(res.signal) + ") at step " + std::to_string(r.step);
      res.exit_code = static_cast<int>(ExitCode::kInternal);
      res.retryable = true;
    } else {
      const int code = WEXITSTATUS(r.status);
      res.rank_exit_code = code;
      res.exit_code = code;
      res.reason = "rank " + std::to_string(r.global) + " exited with code " + std::to_string(code) + " (" +
                   exit_code_name(static_cast<ExitCode>(code)) + ") at step " + std::to_string(r.step);
      res.preempted = code == static_cast<int>(ExitCode::kPreempted);
      res.retryable = exit_code_retryable(code);
    }
    if (!r.collective.empty()) res.reason += ", last collective " + r.collective;
  }

  bool check_stall(AttemptResult& res, Clock::time_point start) {
    for (auto& r : ranks_) {
      if (r.exited) continue;
      const double limit = stall_limit_s(opt_, r.step, r.slowest_step_s);
      const double idle = seconds_since(r.step == 0 ? start : r.last_progress);
      if (limit <= 0 || idle < limit) continue;
      // Root cause: a silent rank (no heartbeat: stopped or hung outside any thread we run) over
      // one that is alive but waiting; among equals, the most-behind rank.
      auto silent_for = [](const Rank& x) { return seconds_since(x.last_beat); };
      Rank* worst = &r;
      for (auto& o : ranks_) {
        if (o.exited) continue;
        const bool o_silent = silent_for(o) > 2.5, w_silent = silent_for(*worst) > 2.5;
        if ((o_silent && !w_silent) || (o_silent == w_silent && o.step < worst->step)) worst = &o;
      }
      // Alive-but-stuck when it kept beating well after its last progress; silent otherwise.
      const double silent = seconds_since(worst->last_beat);
      const bool alive =
          worst->beating &&
          std::chrono::duration<double>(worst->last_beat - worst->last_progress).count() > 1.5 &&
          silent < 2.5;
      res.failed_rank = worst->global;
      res.last_step = worst->step;
      res.last_collective = worst->collective;
      res.exit_code = static_cast<int>(ExitCode::kStalled);
      res.retryable = true;
      char buf[512];
      const std::string how =
          alive ? std::string("alive but not advancing")
                : "no heartbeat for " + std::to_string(static_cast<int>(silent + 0.5)) + " s";
      std::snprintf(buf, sizeof buf, "rank %d made no progress for %.0f s at step %lld (%s%s)", worst->global,
                    idle, static_cast<long long>(worst->step), how.c_str(),
                    worst->collective.empty() ? "" : (", in " + worst->collective).c_str());
      res.reason = buf;
      // What the others were doing: a rank waiting in a collective is waiting for the culprit.
      for (const auto& o : ranks_)
        if (&o != worst && !o.exited && !o.collective.empty())
          res.reason += "; rank " + std::to_string(o.global) + " waiting in " + o.collective;
      return true;
    }
    return false;
  }

  // SIGTERM every live rank's group, wait up to the grace period, then SIGKILL (even stopped ones:
  // SIGCONT first so a SIGSTOPped rank can die of SIGTERM; SIGKILL works regardless).
  void end_group() {
    bool any = false;
    for (auto& r : ranks_)
      if (!r.exited) {
        kill(-r.pid, SIGCONT);
        kill(-r.pid, SIGTERM);
        any = true;
      }
    if (!any) return;
    const auto t0 = Clock::now();
    while (seconds_since(t0) < opt_.term_grace_s) {
      poll_io(50);
      reap();
      if (std::all_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.exited; })) break;
    }
    for (auto& r : ranks_) {
      if (r.exited) {
        kill(-r.pid, SIGKILL);  // anything the rank itself started
        continue;
      }
      log("launch: rank %d did not exit within %.0f s of SIGTERM; sending SIGKILL", r.global,
          opt_.term_grace_s);
      kill(-r.pid, SIGKILL);
      waitpid(r.pid, &r.status, 0);
      r.exited = true;
    }
  }

  const LaunchOptions& opt_;
  static constexpr int kStoreFd = 4;  // rank 0's inherited store socket (after stdout, stderr, heartbeat)
  int restart_;
  int port_;
  int store_fd_;
  std::vector<int> devices_;  // CUDA ordinal per local rank; empty = no GPU pinning
  std::vector<Rank> ranks_;
  bool forwarded_ = false;
  // SIGUSR1s already passed on; those received before this attempt started are not replayed.
  sig_atomic_t checkpoints_forwarded_ = g_checkpoint_requests;
  Clock::time_point forward_time_;
  std::optional<Clock::time_point> consequence_since_;  // when a peer-closed failure was first seen
};

}  // namespace

bool exit_code_retryable(int code) {
  switch (static_cast<ExitCode>(code)) {
    case ExitCode::kUsage:
    case ExitCode::kConfig:
    case ExitCode::kData:
    case ExitCode::kCheckpoint:
    case ExitCode::kOutOfMemory:
    // A full, read-only or unwritable disk is not cured by a restart: it would redo the steps since
    // the last checkpoint and fail at the same write, and a failure while restarting (its first
    // write on the full disk) would then be recorded instead of the real one.
    case ExitCode::kIo:
      return false;
    default:
      return code != 0 && code != 127;  // 127: the worker binary could not be executed
  }
}

double stall_limit_s(const LaunchOptions& options, int64_t step, double slowest_step_s) {
  if (step == 0) return options.init_timeout_s;
  if (options.step_timeout_s <= 0) return 0;
  return std::max(options.step_timeout_s, 3 * slowest_step_s);
}

int run_launch(const LaunchOptions& options) {
  if (options.nproc_per_node < 1) throw_usage("launch: --nproc-per-node must be >= 1");
  if (options.nnodes < 1 || options.node_rank < 0 || options.node_rank >= options.nnodes)
    throw_usage("launch: --node-rank must be in [0, --nnodes)");
  if (options.worker_args.empty())
    throw_usage("launch: give the worker command after --, e.g. -- train --config run.toml");
  // One GPU per rank, decided (and refused) before any rank starts.
  std::vector<int> devices;
  if (options.device == "cuda" || !options.gpus.empty()) {
    std::string why;
    const int count = options.gpu_count >= 0 ? options.gpu_count : visible_gpu_count(&why);
    const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
    const std::string note = cvd != nullptr ? "CUDA_VISIBLE_DEVICES=" + std::string(cvd)
                             : count == 0   ? why
                                            : "";
    devices = assign_gpus(options.nproc_per_node, count, options.gpus, note);
    if (options.log) {
      std::string text;
      for (size_t l = 0; l < devices.size(); ++l)
        text += (l ? ", " : "") + std::string("local rank ") + std::to_string(l) + " -> GPU " +
                std::to_string(devices[l]);
      std::fprintf(options.log, "launch: %s\n", text.c_str());
    }
  }
  struct sigaction sa {};
  sa.sa_handler = on_supervisor_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  struct sigaction usr {};
  usr.sa_handler = on_checkpoint_signal;
  sigemptyset(&usr.sa_mask);
  sigaction(SIGUSR1, &usr, nullptr);
  g_supervisor_signal = 0;

  int crashes = 0;
  for (int attempt = 0;; ++attempt) {
    // --master-port 0: open the store's socket here and hand it to rank 0, so the port stays ours
    // from the pick to the end of the attempt (a port picked, closed and bound later by rank 0 could
    // be taken in between). A fresh port each attempt: the last attempt's stragglers cannot reach it.
    int port = options.master_port;
    int store_fd = -1;
    if (port == 0 && options.nnodes * options.nproc_per_node > 1) {
      std::string error;
      store_fd = comm::listen_tcp(options.master_addr, 0, &port, &error);
      if (store_fd < 0)
        throw Error(ExitCode::kComm, "launch: cannot open the rendezvous store's port on " +
                                         options.master_addr + ": " + error +
                                         " (set --master-addr to an address of this machine)");
      // Above the descriptors a rank's stdio and heartbeat take (0-3) and the one rank 0 gets it as
      // (4): from a bare shell it would be 3, and the heartbeat pipe would replace it in rank 0.
      const int high = fcntl(store_fd, F_DUPFD_CLOEXEC, 10);
      if (high >= 0) {
        close(store_fd);
        store_fd = high;
      }
    }
    if (port == 0) port = 29500;  // one rank: there is no rendezvous
    struct CloseFd {
      int fd;
      ~CloseFd() {
        if (fd >= 0) close(fd);
      }
    } close_store{store_fd};
    Attempt a(options, attempt, port, store_fd, devices);
    const AttemptResult r = a.run();
    if (r.exit_code == 0) return 0;
    // A stop launch was sent (and forwarded) that ended the ranks with their checkpoint (exit 10)
    // is what was asked, not a failure: said as that, at info level. Who asked and why (a Stop, a
    // budget, the system) is the worker's summary's stop_reason.
    const bool asked_stop = g_supervisor_signal != 0 && r.exit_code == static_cast<int>(ExitCode::kPreempted);
    const std::string message =
        asked_stop ? "the ranks stopped with a checkpoint (exit 10) after launch received signal " +
                         std::to_string(static_cast<int>(g_supervisor_signal)) + " (" + r.reason + ")"
                   : r.reason;
    if (options.log) std::fprintf(options.log, "launch: %s\n", message.c_str());
    // The root cause also goes into the metrics stream (stdout), where the app reads it.
    nlohmann::ordered_json ev = {{"v", 1},
                                 {"type", "event"},
                                 {"rank", 0},
                                 {"level", asked_stop ? "info" : "error"},
                                 {"message", message},
                                 {"failed_rank", r.failed_rank},
                                 {"exit_code", r.exit_code},
                                 {"signal", r.signal},
                                 {"last_step", r.last_step},
                                 {"last_collective", r.last_collective},
                                 {"restarts", crashes}};
    const std::string line = ev.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fflush(stdout);
    if (g_supervisor_signal != 0) return static_cast<int>(ExitCode::kPreempted);
    if (r.preempted) {
      // Over several nodes the stop was agreed by every rank, so it came from another node's
      // preemption: restarting here alone would wait for ranks that will not come back. The
      // node ends preempted and whoever started the run (noderun::superviseRun) decides.
      if (options.nnodes > 1) {
        if (options.log)
          std::fprintf(options.log, "launch: rank preempted with %d nodes; ending this node as preempted\n",
                       options.nnodes);
        return static_cast<int>(ExitCode::kPreempted);
      }
      if (options.log)
        std::fprintf(options.log,
                     "launch: rank preempted; restarting (does not count against --max-restarts)\n");
      continue;
    }
    if (!r.retryable) {
      if (options.log)
        std::fprintf(options.log, "launch: not retrying a %s\n",
                     exit_code_name(static_cast<ExitCode>(r.exit_code)));
      return r.exit_code;
    }
    if (crashes >= options.max_restarts) {
      if (options.log)
        std::fprintf(options.log, "launch: giving up after %d restart(s) (--max-restarts %d)\n", crashes,
                     options.max_restarts);
      return r.exit_code;
    }
    ++crashes;
    if (options.log)
      std::fprintf(options.log,
                   "launch: restarting all ranks from the last verified checkpoint (restart %d of %d)\n",
                   crashes, options.max_restarts);
  }
}

}  // namespace flotilla
