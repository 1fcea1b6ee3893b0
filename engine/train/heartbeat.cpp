// Heartbeat writer (see heartbeat.h).
#include "engine/train/heartbeat.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "engine/core/error.h"

namespace flotilla {

Heartbeat::Heartbeat() {
  const char* env = std::getenv("FLOTILLA_HEARTBEAT_FD");
  if (!env) return;
  fd_ = std::atoi(env);
  if (fd_ <= 2 || fcntl(fd_, F_GETFD) < 0) {
    fd_ = -1;
    return;
  }
  fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
  fcntl(fd_, F_SETFD, FD_CLOEXEC);
  parent_ = getppid();
  thread_ = std::thread([this] {
    while (!stop_.load()) {
      beat();
      watch_parent();
      for (int i = 0; i < 10 && !stop_.load(); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
}

Heartbeat::~Heartbeat() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void Heartbeat::set_step(int64_t step) {
  step_.store(step);
  beat();
}

void Heartbeat::set_collective(const std::string& what) {
  std::lock_guard<std::mutex> lock(mu_);
  collective_ = what;
}

void Heartbeat::set_collective_provider(std::function<std::string()> provider) {
  std::lock_guard<std::mutex> lock(mu_);
  provider_ = std::move(provider);
}

void Heartbeat::watch_parent() {
  if (getppid() == parent_) return;
  const double now =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  if (orphaned_at_ < 0) {
    orphaned_at_ = now;
    kill(getpid(), SIGTERM);  // as the parent-death signal does, should it not have been armed
    return;
  }
  if (now - orphaned_at_ < orphan_grace_s_.load()) return;
  char line[160];
  const int n =
      std::snprintf(line, sizeof line,
                    "flotilla-worker train: the supervisor (pid %d) is gone and this rank did not stop "
                    "within %.0f s; ending it\n",
                    static_cast<int>(parent_), orphan_grace_s_.load());
  if (n > 0) {
    const ssize_t w = write(2, line, static_cast<size_t>(n));  // the pipe may be gone too: best effort
    (void)w;
  }
  std::_Exit(static_cast<int>(ExitCode::kStalled));
}

void Heartbeat::beat() {
  if (fd_ < 0) return;
  std::string line = "step=" + std::to_string(step_.load());
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::string what = collective_;
    if (what.empty() && provider_) what = provider_();
    for (char& c : what)
      if (c == '\n') c = ' ';
    if (!what.empty()) line += " coll=" + what;
  }
  line += "\n";
  [[maybe_unused]] const ssize_t n = write(fd_, line.data(), line.size());  // EAGAIN: skip this beat
}

}  // namespace flotilla
