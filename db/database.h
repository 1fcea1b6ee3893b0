// One connection to the workspace database, opened safely (DESIGN.md §5, docs/reliability.md D4).
//
// Decision: opening never repairs or recreates. The file is created 0600 by us before SQLite sees
// it; an existing file must pass PRAGMA quick_check and carry a schema version this build knows,
// and both checks run before the first write (the WAL switch), so a refused file is left
// byte-for-byte as it was for the user to inspect or restore. Schema changes are an ordered list of
// steps, each applied in its own BEGIN IMMEDIATE transaction together with its user_version bump.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

struct sqlite3;

namespace flotilla::db {

// One schema step: after it runs, PRAGMA user_version == version. Versions start at 1 and
// increase by one; a step's SQL may hold several statements.
struct Migration {
  int version;
  const char* name;
  const char* sql;
};

// The built-in schema steps, oldest first (schema.cpp).
const std::vector<Migration>& builtin_migrations();
// The schema version this build writes (the last built-in step).
int current_schema_version();

struct OpenOptions {
  int busy_timeout_ms = 5000;  // how long a statement waits for another connection's lock
  bool create = true;          // create the file when missing (else DbError kOpen)
  bool quick_check = true;     // check integrity before the first write (see check_depth)
  // PRAGMA quick_check reads the whole file (seconds for millions of metric rows), so it runs in
  // full when the file is at most this size or when a WAL is left over (an unclean shutdown: the
  // case where damage is likely). Otherwise opening checks the header against the file size (a
  // truncated file is refused) and reads the schema; a damaged page elsewhere is then reported
  // by the query that reaches it (DbError kDamaged). 0: always run the full check.
  int64_t full_check_max_bytes = int64_t{64} << 20;
  const std::vector<Migration>* migrations = nullptr;  // null: builtin_migrations() (tests pass their own)
};

class Database {
 public:
  // Opens (or creates) `path` and migrates it to the newest schema. Throws DbError.
  explicit Database(const std::string& path, const OpenOptions& options = {});
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;
  Database(Database&& other) noexcept;
  Database& operator=(Database&& other) noexcept;

  const std::string& path() const { return path_; }
  bool created() const { return created_; }  // this open created the file
  int schema_version() const;                // PRAGMA user_version
  sqlite3* handle() const { return db_; }

  // Runs one or more SQL statements that return no rows. Throws DbError(kQuery).
  void exec(const std::string& sql);
  // Runs `body` inside BEGIN IMMEDIATE ... COMMIT; rolls back and rethrows if it throws.
  void write_transaction(const std::function<void()>& body);

  // The meta table: small key/value facts about the workspace ("" when the key is absent).
  std::string meta(const std::string& key) const;
  void set_meta(const std::string& key, const std::string& value);

 private:
  void open_checked(const std::string& path, const OpenOptions& options);
  void close() noexcept;
  void check_integrity();
  void check_header();
  void check_identity(int version, bool builtin_schema);
  void check_tables(int version);
  void migrate(const std::vector<Migration>& steps);

  sqlite3* db_ = nullptr;
  std::string path_;
  bool created_ = false;
};

// Unix time now, in seconds (the store's clock for every timestamp it writes).
double now_seconds();

// Runs `body` as one atomic write: BEGIN IMMEDIATE ... COMMIT on a connection outside a
// transaction, or a SAVEPOINT inside one (so store functions compose inside a writer batch).
// Rolls back and rethrows when `body` throws. (Declared here, not in sql.h, so the layers above
// db/ can group store calls without seeing any SQL.)
void write_tx(Database& db, const std::function<void()>& body);

}  // namespace flotilla::db
