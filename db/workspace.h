// The workspace: the folder that holds the run store (flotilla.db) and, later, local run folders.
//
// Decision: the default location follows the XDG base-directory spec ($XDG_DATA_HOME/flotilla, else
// ~/.local/share/flotilla) and ignores a relative $XDG_DATA_HOME, as the spec requires, so the
// database never lands in whatever directory the app happened to be started from.
#pragma once

#include <string>

namespace flotilla::db {

inline constexpr const char* kDatabaseFileName = "flotilla.db";

// $XDG_DATA_HOME/flotilla, or $HOME/.local/share/flotilla (home from the password database when
// $HOME is unset). Pure: creates nothing.
std::string default_workspace_dir();

// <dir>/flotilla.db
std::string workspace_database_path(const std::string& dir);

// Creates `dir` and its parents; a folder created here gets mode 0700 (it will hold run data).
// Throws DbError(kOpen) naming the folder when it cannot be created or is not a folder.
void ensure_workspace_dir(const std::string& dir);

// Renames a refused database (and its -wal/-shm/-journal companions, so they stay a pair) to
// "<path>.damaged-YYYYMMDD-HHMMSS[-N]" in the same folder and returns the new path. Nothing is
// deleted; the caller then opens `path` afresh. This is the explicit, user-confirmed way out of
// docs/reliability.md D4: a damaged store is never recreated silently. Throws DbError(kOpen).
std::string move_aside(const std::string& path);

// The SQLite library version in use at run time, e.g. "3.40.1".
std::string sqlite_version();

}  // namespace flotilla::db
