// Statement helper (see sql.h for the error mapping).
#include "db/sql.h"

#include <sqlite3.h>

#include "db/database.h"
#include "db/errors.h"
#include "engine/core/clock.h"

namespace flotilla::db {

DbErrorKind error_kind_for(int rc) {
  switch (rc & 0xff) {
    case SQLITE_FULL:
    case SQLITE_IOERR:
    case SQLITE_READONLY:
    case SQLITE_CANTOPEN:
      return DbErrorKind::kFull;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return DbErrorKind::kBusy;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return DbErrorKind::kDamaged;
    case SQLITE_CONSTRAINT:
      return DbErrorKind::kConstraint;
    default:
      return DbErrorKind::kQuery;
  }
}

void throw_sqlite(sqlite3* db, int rc, const std::string& what) {
  const int primary = rc & 0xff;
  std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  msg = what + ": " + msg + " (SQLite code " + std::to_string(rc) + ")";
  const char* file = db ? sqlite3_db_filename(db, "main") : nullptr;
  if (primary == SQLITE_ERROR && db) {
    // Flotilla's statements name only its own schema's tables and columns: one that is missing was
    // dropped behind Flotilla's back (the open checks the schema, so this is a change made since).
    // Say that first; SQLite's words and the statement are the detail.
    const std::string err = sqlite3_errmsg(db);
    if (err.rfind("no such table", 0) == 0 || err.rfind("no such column", 0) == 0)
      throw DbError(DbErrorKind::kDamaged,
                    "the run database " + std::string(file && *file ? file : "") +
                        " lacks part of its schema: it was changed by another program or is damaged "
                        "(SQLite: " +
                        err + ", " + what +
                        "). Flotilla did not change it: restore it from a backup, or move it aside to "
                        "start a new empty workspace.");
  }
  if (file && *file) msg += ", database " + std::string(file);
  switch (primary) {
    case SQLITE_FULL:
    case SQLITE_IOERR:
    case SQLITE_READONLY:
    case SQLITE_CANTOPEN:
      throw DbError(DbErrorKind::kFull, msg +
                                            ". The run database's storage is full or unwritable: free space "
                                            "on its disk or check its permissions.");
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      throw DbError(DbErrorKind::kBusy, msg +
                                            ". Another program held the database longer than the busy "
                                            "timeout; retry.");
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      throw DbError(DbErrorKind::kDamaged, msg);
    case SQLITE_CONSTRAINT:
      throw DbError(DbErrorKind::kConstraint, msg);
    default:
      throw DbError(DbErrorKind::kQuery, msg);
  }
}

Stmt::Stmt(sqlite3* db, std::string_view sql) : db_(db) {
  const int rc = sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &stmt_, nullptr);
  if (rc != SQLITE_OK) throw_sqlite(db, rc, "preparing '" + std::string(sql.substr(0, 80)) + "'");
}

Stmt::Stmt(const Database& db, std::string_view sql) : Stmt(db.handle(), sql) {}

Stmt::~Stmt() { sqlite3_finalize(stmt_); }

Stmt& Stmt::bind(int index, int64_t value) {
  sqlite3_bind_int64(stmt_, index, value);
  return *this;
}

Stmt& Stmt::bind(int index, double value) {
  sqlite3_bind_double(stmt_, index, value);
  return *this;
}

Stmt& Stmt::bind(int index, std::string_view value) {
  sqlite3_bind_text(stmt_, index, value.data(), static_cast<int>(value.size()), SQLITE_TRANSIENT);
  return *this;
}

Stmt& Stmt::bind_null(int index) {
  sqlite3_bind_null(stmt_, index);
  return *this;
}

bool Stmt::step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  const std::string sql = sqlite3_sql(stmt_) ? sqlite3_sql(stmt_) : "";
  sqlite3_reset(stmt_);
  throw_sqlite(db_, rc, "running '" + sql.substr(0, 80) + "'");
}

void Stmt::run() {
  while (step()) {
  }
}

void Stmt::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

bool Stmt::is_null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
int64_t Stmt::i64(int col) const { return sqlite3_column_int64(stmt_, col); }
double Stmt::f64(int col) const { return sqlite3_column_double(stmt_, col); }

std::string Stmt::text(int col) const {
  const auto* t = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
  return t ? std::string(t, static_cast<size_t>(sqlite3_column_bytes(stmt_, col))) : std::string();
}

std::optional<double> Stmt::opt_f64(int col) const {
  if (is_null(col)) return std::nullopt;
  return f64(col);
}

std::optional<int64_t> Stmt::opt_i64(int col) const {
  if (is_null(col)) return std::nullopt;
  return i64(col);
}

double now_seconds() { return clk::wall_now(); }

int64_t query_int(const Database& db, std::string_view sql) {
  Stmt st(db, sql);
  return st.step() ? st.i64(0) : 0;
}

}  // namespace flotilla::db

namespace flotilla::db {

void write_tx(Database& db, const std::function<void()>& body) {
  if (sqlite3_get_autocommit(db.handle()) != 0) {
    db.write_transaction(body);
    return;
  }
  db.exec("SAVEPOINT store_write");
  try {
    body();
    db.exec("RELEASE store_write");
  } catch (...) {
    sqlite3_exec(db.handle(), "ROLLBACK TO store_write; RELEASE store_write", nullptr, nullptr, nullptr);
    throw;
  }
}

}  // namespace flotilla::db

namespace flotilla::db {
int64_t changes_count(const Database& db) { return sqlite3_changes64(db.handle()); }
int64_t last_insert_id(const Database& db) { return sqlite3_last_insert_rowid(db.handle()); }
}  // namespace flotilla::db
