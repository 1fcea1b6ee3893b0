// Errors of the run store: the runtime-failure tier (STYLE.md principle 6) for db/.
//
// One exception type with a kind, so the app can react to the cases that need a different answer
// (a damaged file is reported and never recreated; a newer schema asks for a newer Flotilla)
// while every message still names the file and says what to do.
#pragma once

#include <stdexcept>
#include <string>

namespace flotilla::db {

enum class DbErrorKind {
  kOpen,        // the file or its folder cannot be created or opened (permissions, disk)
  kDamaged,     // not a database, or PRAGMA quick_check found corruption (D4)
  kTooNew,      // user_version is newer than this build understands
  kMigration,   // a schema step failed; the transaction was rolled back
  kQuery,       // any other SQLite failure
  kFull,        // SQLITE_FULL or an I/O error: the storage is full or unwritable (D3)
  kBusy,        // another connection held the lock longer than the busy timeout (D2)
  kConstraint,  // a uniqueness or foreign-key rule refused the change (e.g. a duplicate run name)
  kNotFound,    // a run, node or price named by the caller does not exist
  kInvalid,     // a request the store refuses (e.g. a status change the state machine forbids)
};

class DbError : public std::runtime_error {
 public:
  DbError(DbErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  DbErrorKind kind() const { return kind_; }

 private:
  DbErrorKind kind_;
};

}  // namespace flotilla::db
