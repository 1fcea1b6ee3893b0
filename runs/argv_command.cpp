// A user's command run as an argument list (see argv_command.h).
#include "runs/argv_command.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>

namespace flotilla::runs {
namespace {

constexpr size_t kKeep = 32 * 1024;  // bytes kept at the head and at the tail of the output

bool executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

// Drains the child's output pipe on a thread of its own.
struct ArgvCommand::Reader {
  int fd = -1;
  std::atomic<bool> stop{false};
  std::atomic<bool> done{false};  // it saw EOF (or was stopped)
  std::mutex mutex;
  std::string head, tail;
  size_t dropped = 0;

  void run() {
    char buf[4096];
    while (!stop.load()) {
      pollfd p{fd, POLLIN, 0};
      const int r = ::poll(&p, 1, 100);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) continue;
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // EOF: every writer has closed it
      std::lock_guard<std::mutex> lock(mutex);
      size_t off = 0;
      const size_t len = static_cast<size_t>(n);
      if (head.size() < kKeep) {
        off = std::min(len, kKeep - head.size());
        head.append(buf, off);
      }
      tail.append(buf + off, len - off);
      if (tail.size() > kKeep) {
        dropped += tail.size() - kKeep;
        tail.erase(0, tail.size() - kKeep);
      }
    }
    done = true;
  }
  std::string text() {
    std::lock_guard<std::mutex> lock(mutex);
    if (dropped == 0) return head + tail;
    return head + "\n[... " + std::to_string(dropped) + " bytes left out ...]\n" + tail;
  }
};

std::string find_on_path(const std::string& program) {
  if (program.empty()) return "";
  if (program.find('/') != std::string::npos) return executable_file(program) ? program : "";
  const char* path = std::getenv("PATH");
  const std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t colon = dirs.find(':', start);
    if (colon == std::string::npos) colon = dirs.size();
    std::string dir = dirs.substr(start, colon - start);
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + program;
    if (executable_file(candidate)) return candidate;
    start = colon + 1;
  }
  return "";
}

std::string command_text(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    if (!out.empty()) out += ' ';
    bool quote = a.empty();
    std::string shown;
    for (unsigned char c : a) {
      if (c < 0x20 || c == 0x7f) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02x", c);
        shown += buf;
        quote = true;
      } else {
        if (std::strchr(" '\"\\$`;&|<>(){}[]*?!#~", c)) quote = true;
        if (c == '\'')
          shown += "'\\''";
        else
          shown += static_cast<char>(c);
      }
    }
    out += quote ? "'" + shown + "'" : shown;
  }
  return out;
}

ArgvCommand::~ArgvCommand() {
  if (pid_ > 0) {
    ::kill(-pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  if (reader_) reader_->stop = true;
  if (reader_thread_.joinable()) reader_thread_.join();
  if (reader_ && reader_->fd >= 0) ::close(reader_->fd);
}

bool ArgvCommand::start(const std::vector<std::string>& argv, double timeout_s, const std::string& log_path,
                        std::string* why) {
  if (pid_ > 0) {
    if (why) *why = "a command is still running";
    return false;
  }
  if (argv.empty() || argv[0].empty()) {
    if (why) *why = "the command is empty";
    return false;
  }
  const std::string exe = find_on_path(argv[0]);
  if (exe.empty()) {
    if (why)
      *why = argv[0].find('/') != std::string::npos ? "'" + argv[0] + "' is not an executable file"
                                                    : "'" + argv[0] + "' was not found on PATH";
    return false;
  }
  // Everything the child needs is prepared before fork: it only dups and execs.
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    if (why) *why = std::string("cannot make a pipe: ") + std::strerror(errno);
    return false;
  }
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    if (why) *why = std::string("cannot make a pipe: ") + std::strerror(errno);
    return false;
  }
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::dup2(out[1], 1);
    ::dup2(out[1], 2);
#ifdef SYS_close_range
    ::syscall(SYS_close_range, 3U, ~0U, 4U /* CLOSE_RANGE_CLOEXEC */);
#endif
    ::execv(exe.c_str(), cargv.data());
    const int e = errno;
    ssize_t w = ::write(err[1], &e, sizeof e);
    (void)w;
    ::_exit(127);
  }
  const int fork_errno = errno;
  if (devnull >= 0) ::close(devnull);
  ::close(out[1]);
  ::close(err[1]);
  if (pid < 0) {
    ::close(out[0]);
    ::close(err[0]);
    if (why) *why = std::string("cannot start a process: ") + std::strerror(fork_errno);
    return false;
  }
  ::setpgid(pid, pid);  // also here: the group exists before any kill(-pid)
  int exec_errno = 0;
  ssize_t n;
  while ((n = ::read(err[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
  }
  ::close(err[0]);
  if (n == static_cast<ssize_t>(sizeof exec_errno)) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    ::close(out[0]);
    if (why) *why = "cannot run " + exe + ": " + std::strerror(exec_errno);
    return false;
  }
  pid_ = pid;
  killed_ = false;
  timeout_s_ = timeout_s;
  deadline_ = std::chrono::steady_clock::now() +
              std::chrono::milliseconds(static_cast<int64_t>(std::max(0.0, timeout_s) * 1000));
  log_path_ = log_path;
  reader_ = std::make_shared<Reader>();
  reader_->fd = out[0];
  reader_thread_ = std::thread([r = reader_] { r->run(); });
  return true;
}

CommandOutcome ArgvCommand::finish(int status) {
  pid_ = 0;
  // The command has ended; output still in the pipe is read, but a daemon it left holding the pipe
  // open is not waited for beyond a second.
  const auto stop_at = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (!reader_->done && std::chrono::steady_clock::now() < stop_at)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  reader_->stop = true;
  reader_thread_.join();
  ::close(reader_->fd);
  reader_->fd = -1;
  CommandOutcome o;
  o.output = reader_->text();
  reader_.reset();
  if (WIFEXITED(status)) {
    o.exit_status = WEXITSTATUS(status);
    o.ok = o.exit_status == 0;
    o.description = "exit status " + std::to_string(o.exit_status);
  } else if (WIFSIGNALED(status)) {
    o.signal = WTERMSIG(status);
    o.description = "ended by signal " + std::to_string(o.signal);
  }
  if (killed_) {
    o.ok = false;
    o.timed_out = true;
    char buf[64];
    std::snprintf(buf, sizeof buf, "killed after the %g s timeout", timeout_s_);
    o.description = buf;
  }
  if (!log_path_.empty()) {
    std::ofstream log(log_path_, std::ios::binary | std::ios::trunc);
    log << o.output;
    if (!o.output.empty() && o.output.back() != '\n') log << '\n';
    log << "[" << o.description << "]\n";
  }
  return o;
}

std::optional<CommandOutcome> ArgvCommand::poll() {
  if (pid_ <= 0) return std::nullopt;
  int status = 0;
  pid_t r;
  while ((r = ::waitpid(pid_, &status, WNOHANG)) < 0 && errno == EINTR) {
  }
  if (r == pid_) return finish(status);
  if (!killed_ && std::chrono::steady_clock::now() >= deadline_) {
    ::kill(-pid_, SIGKILL);
    killed_ = true;
  }
  return std::nullopt;
}

CommandOutcome ArgvCommand::wait() {
  for (;;) {
    if (pid_ <= 0) return CommandOutcome{false, -1, 0, false, "", "not running"};
    if (auto o = poll()) return *o;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace flotilla::runs
