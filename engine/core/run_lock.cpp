// The run folder lock (see run_lock.h).
#include "engine/core/run_lock.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "engine/core/error.h"

namespace flotilla {
namespace {

std::string lock_path(const std::string& dir) { return dir + "/" + kRunLockFile; }

int open_lock(const std::string& dir) {
  const std::string path = lock_path(dir);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    throw_io("cannot open the run folder's lock " + path + ": " + errno_string(errno) +
             " (check that the folder is writable)");
  return fd;
}

}  // namespace

int hold_run_folder_shared(const std::string& dir) {
  const int fd = open_lock(dir);
  // A starter holds the lock exclusively only for the moment of its check: wait that out.
  for (int tries = 0;; ++tries) {
    if (::flock(fd, LOCK_SH | LOCK_NB) == 0) return fd;
    const int err = errno;
    // A file system without flock (some network mounts): the run goes on, unguarded, as before.
    if (err != EWOULDBLOCK && err != EINTR) return fd;
    if (tries >= 200) {
      ::close(fd);
      throw_io(lock_path(dir) + " has been held exclusively for 10 s: another process is starting a run in " +
               dir + "; wait for it, or use another run folder");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

int try_lock_run_folder(const std::string& dir) {
  const int fd = open_lock(dir);
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) return fd;  // no flock on this file system: nothing can be known
    ::close(fd);
    return -1;
  }
  return fd;
}

std::vector<pid_t> run_folder_users(const std::string& dir) {
  std::vector<pid_t> out;
  struct stat lock {};
  if (::stat(lock_path(dir).c_str(), &lock) != 0) return out;
  DIR* proc = ::opendir("/proc");
  if (!proc) return out;
  const pid_t self = ::getpid();
  while (dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0' || pid == self) continue;
    const std::string fd_dir = "/proc/" + std::string(e->d_name) + "/fd";
    DIR* fds = ::opendir(fd_dir.c_str());
    if (!fds) continue;  // gone, or another user's
    while (dirent* f = ::readdir(fds)) {
      if (f->d_name[0] == '.') continue;
      struct stat st {};
      if (::stat((fd_dir + "/" + f->d_name).c_str(), &st) == 0 && st.st_dev == lock.st_dev &&
          st.st_ino == lock.st_ino) {
        out.push_back(static_cast<pid_t>(pid));
        break;
      }
    }
    ::closedir(fds);
  }
  ::closedir(proc);
  std::sort(out.begin(), out.end());
  return out;
}

std::string pid_list_text(const std::vector<pid_t>& pids) {
  std::string out;
  for (pid_t p : pids) out += (out.empty() ? "" : ", ") + std::to_string(p);
  return out;
}

}  // namespace flotilla
