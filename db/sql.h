// A prepared SQLite statement for db/ code: prepare once, bind, step, read columns, reset.
//
// Decision: every failure becomes a DbError whose kind says what the caller can do about it:
// SQLITE_FULL and I/O errors map to kFull ("storage full or unwritable", docs/reliability.md D3) so the
// writer can drop a batch and keep training unblocked, BUSY/LOCKED map to kBusy, damage to kDamaged.
// Column readers are total: NULL reads as 0, 0.0 or "" (use is_null() where NULL matters).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

struct sqlite3;
struct sqlite3_stmt;

namespace flotilla::db {

class Database;

enum class DbErrorKind;
// The DbError kind for an SQLite result code (FULL/IOERR -> kFull, BUSY -> kBusy, ...).
DbErrorKind error_kind_for(int rc);

// Throws DbError for rc (not SQLITE_OK/ROW/DONE) on db; `what` names the operation.
[[noreturn]] void throw_sqlite(sqlite3* db, int rc, const std::string& what);

class Stmt {
 public:
  Stmt(sqlite3* db, std::string_view sql);
  Stmt(const Database& db, std::string_view sql);
  ~Stmt();
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  // Binding (1-based index, as SQLite). Returns *this for chaining.
  Stmt& bind(int index, int64_t value);
  Stmt& bind(int index, int value) { return bind(index, static_cast<int64_t>(value)); }
  Stmt& bind(int index, double value);
  Stmt& bind(int index, std::string_view value);
  Stmt& bind(int index, const char* value) { return bind(index, std::string_view(value)); }
  Stmt& bind(int index, const std::string& value) { return bind(index, std::string_view(value)); }
  Stmt& bind_null(int index);
  template <typename T>
  Stmt& bind(int index, const std::optional<T>& value) {
    return value ? bind(index, *value) : bind_null(index);
  }

  // Steps once: true when a row is available, false when done. Throws DbError otherwise.
  bool step();
  // step() until done (for statements that return no rows).
  void run();
  // Resets for another execution and clears the bindings.
  void reset();

  bool is_null(int col) const;
  int64_t i64(int col) const;
  double f64(int col) const;
  std::string text(int col) const;
  std::optional<double> opt_f64(int col) const;
  std::optional<int64_t> opt_i64(int col) const;

  sqlite3_stmt* get() const { return stmt_; }

 private:
  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
};

// Runs one query that returns a single integer (0 when no row).
int64_t query_int(const Database& db, std::string_view sql);

}  // namespace flotilla::db

namespace flotilla::db {
// sqlite3_changes64() and sqlite3_last_insert_rowid() of the connection.
int64_t changes_count(const Database& db);
int64_t last_insert_id(const Database& db);
}  // namespace flotilla::db
