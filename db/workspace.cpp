// Workspace location and creation (see workspace.h).
#include "db/workspace.h"

#include <pwd.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <system_error>

#include "db/errors.h"

namespace flotilla::db {
namespace {

std::string home_dir() {
  if (const char* home = std::getenv("HOME"); home && *home) return home;
  if (const passwd* pw = getpwuid(getuid()); pw && pw->pw_dir) return pw->pw_dir;
  return "/tmp";
}

}  // namespace

std::string default_workspace_dir() {
  const char* xdg = std::getenv("XDG_DATA_HOME");
  const std::string base = (xdg && xdg[0] == '/') ? std::string(xdg) : home_dir() + "/.local/share";
  return base + "/flotilla";
}

std::string workspace_database_path(const std::string& dir) {
  if (!dir.empty() && dir.back() == '/') return dir + kDatabaseFileName;
  return dir + "/" + kDatabaseFileName;
}

void ensure_workspace_dir(const std::string& dir) {
  if (dir.empty()) throw DbError(DbErrorKind::kOpen, "workspace folder: the path is empty");
  struct stat st {};
  if (::stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode))
      throw DbError(
          DbErrorKind::kOpen,
          "workspace folder " + dir + " exists but is not a folder: choose another with --workspace DIR");
    return;
  }
  // Parents get the usual permissions (mkdir -p); only the workspace itself is private.
  for (size_t i = 1; i < dir.size(); ++i) {
    if (dir[i] != '/') continue;
    const std::string parent = dir.substr(0, i);
    if (::mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST)
      throw DbError(DbErrorKind::kOpen,
                    "cannot create folder " + parent + ": " + std::generic_category().message(errno));
  }
  if (::mkdir(dir.c_str(), 0700) != 0) {
    if (errno == EEXIST) return;  // created concurrently by another Flotilla
    throw DbError(DbErrorKind::kOpen,
                  "cannot create workspace folder " + dir + ": " + std::generic_category().message(errno));
  }
  ::chmod(dir.c_str(), 0700);  // mkdir honours the umask; make the mode exact
}

std::string move_aside(const std::string& path) {
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &local);
  const std::string base = path + ".damaged-" + stamp;
  std::string target = base;
  struct stat st {};
  for (int n = 2; ::lstat(target.c_str(), &st) == 0; ++n) target = base + "-" + std::to_string(n);

  if (::rename(path.c_str(), target.c_str()) != 0)
    throw DbError(DbErrorKind::kOpen, "cannot move " + path + " aside to " + target + ": " +
                                          std::generic_category().message(errno) + ". Move it yourself.");
  for (const char* companion : {"-wal", "-shm", "-journal"}) {
    const std::string from = path + companion;
    if (::lstat(from.c_str(), &st) == 0 && ::rename(from.c_str(), (target + companion).c_str()) != 0)
      throw DbError(DbErrorKind::kOpen, "moved " + path + " to " + target + " but cannot move " + from +
                                            ": " + std::generic_category().message(errno) +
                                            ". Move it yourself.");
  }
  return target;
}

std::string sqlite_version() { return sqlite3_libversion(); }

}  // namespace flotilla::db
