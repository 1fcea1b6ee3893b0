// Opening, checking and migrating the workspace database (see database.h for the decisions).
#include "db/database.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>
#include <utility>

#include "db/errors.h"
#include "db/sql.h"
#include "flotilla/build_info.h"

namespace flotilla::db {
namespace {

// Less free space than this when an open fails with an I/O error: the disk is full (SQLite needs a
// few pages for the -wal and -shm files to open a WAL database).
constexpr int64_t kFullBelowBytes = int64_t{1} << 20;

constexpr const char* kRefusedAdvice =
    " Flotilla did not change the file. Restore it from a backup, or move it aside to start a new empty "
    "workspace, or choose another workspace with --workspace DIR.";

// A prepared statement that finalizes itself.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) { rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr); }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  int prepare_rc() const { return rc_; }
  sqlite3_stmt* get() const { return stmt_; }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_OK;
};

std::string sqlite_message(sqlite3* db, int rc) {
  std::string m = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  return m + " (SQLite code " + std::to_string(rc) + ")";
}

bool is_damage(int rc) {
  const int primary = rc & 0xff;
  return primary == SQLITE_NOTADB || primary == SQLITE_CORRUPT;
}

// Creates the file with mode 0600 before SQLite opens it, so it is never world-readable, not
// even for the moment between creation and a chmod. Returns true when this call created it.
bool create_private_file(const std::string& path, bool create) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode))
      throw DbError(DbErrorKind::kOpen, "workspace database " + path + " exists but is not a regular file");
    return false;
  }
  if (!create) throw DbError(DbErrorKind::kOpen, "workspace database " + path + " does not exist");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST) return false;  // another Flotilla created it just now
    throw DbError(DbErrorKind::kOpen, "cannot create workspace database " + path + ": " +
                                          std::generic_category().message(errno) +
                                          ". Check that the folder exists and is writable.");
  }
  ::fchmod(fd, 0600);  // open() honours the umask; make the mode exact
  ::close(fd);
  return true;
}

int read_user_version(sqlite3* db, const std::string& path) {
  Statement st(db, "PRAGMA user_version");
  int rc = st.prepare_rc();
  if (rc == SQLITE_OK) rc = sqlite3_step(st.get());
  if (rc != SQLITE_ROW) {
    if (is_damage(rc))
      throw DbError(DbErrorKind::kDamaged, "workspace database " + path + " is damaged: " +
                                               sqlite_message(db, rc) + "." + kRefusedAdvice);
    throw DbError(DbErrorKind::kQuery,
                  "cannot read the schema version of " + path + ": " + sqlite_message(db, rc));
  }
  return sqlite3_column_int(st.get(), 0);
}

// The number of user tables (SQLite's own sqlite_* tables excluded).
int count_user_tables(sqlite3* db, const char* extra_condition, const std::string& path) {
  const std::string sql =
      std::string("SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%'") +
      extra_condition;
  Statement st(db, sql.c_str());
  int rc = st.prepare_rc();
  if (rc == SQLITE_OK) rc = sqlite3_step(st.get());
  if (rc != SQLITE_ROW)
    throw DbError(is_damage(rc) ? DbErrorKind::kDamaged : DbErrorKind::kQuery,
                  "cannot read the tables of " + path + ": " + sqlite_message(db, rc));
  return sqlite3_column_int(st.get(), 0);
}

std::string folder_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

// Opening writes (WAL mode, the -shm index, migrations), even for commands that only read. A file
// or folder that cannot be written is refused up front with the reason, instead of SQLite's
// "attempt to write a readonly database" at the first write.
void refuse_unwritable(const std::string& path) {
  const std::string dir = folder_of(path);
  for (const std::string& p : {path, dir}) {
    if (::access(p.c_str(), W_OK) == 0) continue;
    const int err = errno;
    if (err == ENOENT) continue;  // create_private_file reports a missing file or folder
    throw DbError(
        DbErrorKind::kOpen,
        "workspace database " + path + ": " + (p == dir ? "its folder " + dir : std::string("the file")) +
            " is not writable (" + std::generic_category().message(err) +
            "). Flotilla writes to the database and its folder even to list runs (write-ahead log). "
            "Make it writable, or copy the workspace to a writable place and pass --workspace DIR.");
  }
}

// Bytes free for an unprivileged writer on the file system holding `dir` (-1 when unknown).
int64_t free_bytes(const std::string& dir) {
  struct statvfs vs {};
  if (::statvfs(dir.c_str(), &vs) != 0) return -1;
  return static_cast<int64_t>(vs.f_bavail) * static_cast<int64_t>(vs.f_frsize);
}

bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

// Table name -> column names, from sqlite_schema and pragma_table_info (SQLite's own tables left out).
using TableColumns = std::map<std::string, std::set<std::string>>;

TableColumns read_table_columns(sqlite3* db, const std::string& path) {
  Statement st(db,
               "SELECT m.name, p.name FROM sqlite_schema AS m JOIN pragma_table_info(m.name) AS p "
               "WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' ORDER BY m.name, p.cid");
  int rc = st.prepare_rc();
  TableColumns out;
  if (rc == SQLITE_OK) {
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
      const auto* table = reinterpret_cast<const char*>(sqlite3_column_text(st.get(), 0));
      const auto* column = reinterpret_cast<const char*>(sqlite3_column_text(st.get(), 1));
      out[table ? table : ""].insert(column ? column : "");
    }
  }
  if (rc != SQLITE_DONE)
    throw DbError(is_damage(rc) ? DbErrorKind::kDamaged : DbErrorKind::kQuery,
                  "cannot read the tables of " + path + ": " + sqlite_message(db, rc));
  return out;
}

// The tables and columns that schema version `version` of the built-in migrations defines: the
// steps replayed into an in-memory database, so the expectation can never drift from schema.cpp.
// Computed once per version and process. Empty when the replay fails (a bug the migration tests
// catch; then nothing is refused for it).
const TableColumns& builtin_tables_at(int version) {
  static std::mutex mu;
  static std::map<int, TableColumns> cache;
  const std::lock_guard<std::mutex> lock(mu);
  const auto it = cache.find(version);
  if (it != cache.end()) return it->second;
  TableColumns& out = cache[version];
  sqlite3* mem = nullptr;
  if (sqlite3_open_v2(":memory:", &mem, SQLITE_OPEN_READWRITE, nullptr) == SQLITE_OK) {
    bool ok = true;
    for (const Migration& step : builtin_migrations())
      if (ok && step.version <= version)
        ok = sqlite3_exec(mem, step.sql, nullptr, nullptr, nullptr) == SQLITE_OK;
    if (ok) {
      try {
        out = read_table_columns(mem, ":memory:");
      } catch (const DbError&) {
        out.clear();
      }
    }
  }
  sqlite3_close(mem);
  return out;
}

bool is_busy(int rc) { return (rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED; }

}  // namespace

Database::Database(const std::string& path, const OpenOptions& options) : path_(path) {
  refuse_unwritable(path);
  // Remembered so that an open failing on a full disk removes the side files it created itself.
  const bool had_wal = exists(path + "-wal"), had_shm = exists(path + "-shm");
  try {
    open_checked(path, options);
  } catch (const DbError& e) {
    const int64_t free = free_bytes(folder_of(path));
    if (e.kind() == DbErrorKind::kDamaged || e.kind() == DbErrorKind::kTooNew || free < 0 ||
        free >= kFullBelowBytes)
      throw;
    close();
    // A -wal/-shm this open created holds no data while the -wal is empty (the -shm is only an index
    // of the -wal, and on a full disk SQLite could write just its first bytes): remove them.
    struct stat wal_st {};
    const bool wal_empty = ::stat((path + "-wal").c_str(), &wal_st) != 0 || wal_st.st_size == 0;
    for (const auto& [side, had] : {std::pair{path + "-wal", had_wal}, std::pair{path + "-shm", had_shm}}) {
      struct stat st {};
      if (!had && wal_empty && ::stat(side.c_str(), &st) == 0 && st.st_size < 32768) ::unlink(side.c_str());
    }
    struct stat db_st {};
    if (created_ && ::stat(path.c_str(), &db_st) == 0 && db_st.st_size == 0) ::unlink(path.c_str());
    throw DbError(DbErrorKind::kFull, "cannot open workspace database " + path + ": the disk holding " +
                                          folder_of(path) + " is full (" + std::to_string(free) +
                                          " bytes free). Free some space and retry; the database was not "
                                          "changed. (SQLite said: " +
                                          e.what() + ")");
  }
}

void Database::open_checked(const std::string& path, const OpenOptions& options) {
  const std::vector<Migration>& steps = options.migrations ? *options.migrations : builtin_migrations();
  const int supported = steps.empty() ? 0 : steps.back().version;
  created_ = create_private_file(path, options.create);

  int rc = sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_EXRESCODE, nullptr);
  if (rc != SQLITE_OK) {
    const std::string msg = sqlite_message(db_, rc);
    close();
    throw DbError(DbErrorKind::kOpen,
                  "cannot open workspace database " + path + ": " + msg +
                      ". Check the file's permissions (it must be readable and writable).");
  }
  sqlite3_extended_result_codes(db_, 1);
  sqlite3_busy_timeout(db_, options.busy_timeout_ms);

  try {
    // Read-only checks first: a refused file must stay exactly as it was.
    if (options.quick_check) {
      struct stat db_st {
      }, wal_st{};
      const bool big = ::stat(path.c_str(), &db_st) == 0 && options.full_check_max_bytes > 0 &&
                       db_st.st_size > options.full_check_max_bytes;
      const bool hot_wal = ::stat((path + "-wal").c_str(), &wal_st) == 0 && wal_st.st_size > 0;
      if (big && !hot_wal)
        check_header();
      else
        check_integrity();
    }
    // The version, the identity and the tables are read in one read transaction: another process
    // creating this store at the same moment commits each schema step with its version, so a
    // snapshot never shows tables without their version (D16 of the second audit).
    exec("BEGIN");
    try {
      const int version = read_user_version(db_, path);
      if (version > supported)
        throw DbError(DbErrorKind::kTooNew,
                      "workspace database " + path + " has schema version " + std::to_string(version) +
                          ", but this Flotilla (" FLOTILLA_VERSION_STRING ") understands versions up to " +
                          std::to_string(supported) +
                          ": it was written by a newer Flotilla. Open it with that version, or choose "
                          "another workspace with --workspace DIR. The file was not changed.");
      check_identity(version, options.migrations == nullptr);
      if (options.migrations == nullptr) check_tables(version);
      exec("COMMIT");
    } catch (...) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }

    // WAL lets the UI read while the writer thread writes; it persists in the file. Switching a new
    // file to WAL needs it to itself for a moment: when another Flotilla opening it at the same time
    // holds it, SQLite can answer "locked" at once, so the switch is retried within the busy timeout.
    std::string mode;
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(options.busy_timeout_ms);
    for (;;) {
      {
        Statement wal(db_, "PRAGMA journal_mode=WAL");
        rc = wal.prepare_rc() == SQLITE_OK ? sqlite3_step(wal.get()) : wal.prepare_rc();
        if (rc == SQLITE_ROW) mode = reinterpret_cast<const char*>(sqlite3_column_text(wal.get(), 0));
      }  // finalized here: an open statement would block the migrations' COMMIT
      if (mode == "wal" || !is_busy(rc) || std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (mode != "wal")
      throw DbError(DbErrorKind::kOpen,
                    "workspace database " + path + " cannot use write-ahead logging (journal mode '" + mode +
                        "', " + sqlite_message(db_, rc) +
                        "). Put the workspace on a local file system with --workspace DIR.");
    exec("PRAGMA foreign_keys=ON; PRAGMA synchronous=NORMAL;");
    migrate(steps);
  } catch (...) {
    close();
    throw;
  }
}

Database::~Database() { close(); }

Database::Database(Database&& other) noexcept
    : db_(other.db_), path_(std::move(other.path_)), created_(other.created_) {
  other.db_ = nullptr;
}

Database& Database::operator=(Database&& other) noexcept {
  if (this != &other) {
    close();
    db_ = other.db_;
    path_ = std::move(other.path_);
    created_ = other.created_;
    other.db_ = nullptr;
  }
  return *this;
}

void Database::close() noexcept {
  if (db_) sqlite3_close_v2(db_);
  db_ = nullptr;
}

void Database::check_integrity() {
  Statement st(db_, "PRAGMA quick_check");
  int rc = st.prepare_rc();
  std::string problems;
  int lines = 0;
  if (rc == SQLITE_OK) {
    while ((rc = sqlite3_step(st.get())) == SQLITE_ROW) {
      const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(st.get(), 0));
      const std::string line = text ? text : "";
      if (line == "ok") continue;
      if (++lines <= 3) problems += (problems.empty() ? "" : "; ") + line;
    }
  }
  if (rc != SQLITE_DONE && rc != SQLITE_OK) {
    if (is_damage(rc))
      throw DbError(DbErrorKind::kDamaged, "workspace database " + path_ + " is damaged: " +
                                               sqlite_message(db_, rc) + "." + kRefusedAdvice);
    if ((rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED)
      throw DbError(DbErrorKind::kOpen,
                    "workspace database " + path_ +
                        " is locked by another program: close it (or another Flotilla) and retry");
    throw DbError(DbErrorKind::kOpen,
                  "cannot read workspace database " + path_ + ": " + sqlite_message(db_, rc));
  }
  if (!problems.empty())
    throw DbError(DbErrorKind::kDamaged, "workspace database " + path_ +
                                             " is damaged: integrity check found " + std::to_string(lines) +
                                             " problem(s): " + problems + "." + kRefusedAdvice);
}

// The cheap check for big files: the header's page count must fit in the file (a truncated file
// is refused) and the schema must be readable.
void Database::check_header() {
  std::string header(100, '\0');
  const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  ssize_t got = -1;
  struct stat st {};
  if (fd >= 0) {
    got = ::pread(fd, header.data(), header.size(), 0);
    ::fstat(fd, &st);
    ::close(fd);
  }
  const auto be32 = [&](size_t at) {
    return (static_cast<uint32_t>(static_cast<unsigned char>(header[at])) << 24) |
           (static_cast<uint32_t>(static_cast<unsigned char>(header[at + 1])) << 16) |
           (static_cast<uint32_t>(static_cast<unsigned char>(header[at + 2])) << 8) |
           static_cast<uint32_t>(static_cast<unsigned char>(header[at + 3]));
  };
  if (got != 100 || header.compare(0, 16, std::string("SQLite format 3\0", 16)) != 0)
    throw DbError(DbErrorKind::kDamaged, "workspace database " + path_ +
                                             " is damaged: it is not an SQLite database." + kRefusedAdvice);
  uint32_t page_size = (static_cast<uint32_t>(static_cast<unsigned char>(header[16])) << 8) |
                       static_cast<unsigned char>(header[17]);
  if (page_size == 1) page_size = 65536;
  const uint32_t pages = be32(28);
  if (be32(24) == be32(92) && pages > 0 &&
      static_cast<int64_t>(st.st_size) < static_cast<int64_t>(pages) * page_size)
    throw DbError(DbErrorKind::kDamaged, "workspace database " + path_ + " is damaged: it is truncated (" +
                                             std::to_string(st.st_size) + " bytes, its header says " +
                                             std::to_string(static_cast<int64_t>(pages) * page_size) + ")." +
                                             kRefusedAdvice);
  count_user_tables(db_, "", path_);  // reads and parses the schema
}

// A valid SQLite file can still be someone else's: tables but no schema version means another
// program's database; a Flotilla version without the meta table means a damaged or forged one.
void Database::check_identity(int version, bool builtin_schema) {
  if (version == 0 && count_user_tables(db_, "", path_) > 0)
    throw DbError(DbErrorKind::kDamaged,
                  "workspace database " + path_ +
                      " is an SQLite database without a Flotilla schema version: it belongs to another "
                      "program or is damaged." +
                      kRefusedAdvice);
  if (version >= 1 && builtin_schema && count_user_tables(db_, " AND name = 'meta'", path_) == 0)
    throw DbError(DbErrorKind::kDamaged,
                  "workspace database " + path_ + " says schema version " + std::to_string(version) +
                      " but lacks its meta table: it is damaged or not Flotilla's." + kRefusedAdvice);
}

// A Flotilla store missing a table or a column of its schema version (dropped by hand or by
// another program) is refused at open, naming what is missing, instead of failing later with
// SQLite's "no such table" in the middle of a command (D22 of the second audit).
void Database::check_tables(int version) {
  if (version < 1) return;
  const TableColumns& want = builtin_tables_at(version);
  if (want.empty()) return;
  const TableColumns have = read_table_columns(db_, path_);
  std::string missing;
  int count = 0;
  for (const auto& [table, columns] : want) {
    const auto it = have.find(table);
    if (it == have.end()) {
      if (++count <= 3) missing += (missing.empty() ? "" : "; ") + std::string("the table '") + table + "'";
      continue;
    }
    for (const std::string& column : columns)
      if (!it->second.count(column) && ++count <= 3)
        missing += (missing.empty() ? "" : "; ") + std::string("the column '") + column + "' of table '" +
                   table + "'";
  }
  if (count == 0) return;
  throw DbError(DbErrorKind::kDamaged,
                "workspace database " + path_ + " is damaged: it lacks " + missing +
                    (count > 3 ? " (and " + std::to_string(count - 3) + " more)" : std::string()) +
                    ", which its schema version " + std::to_string(version) +
                    " defines (dropped by hand or by another program)." + kRefusedAdvice);
}

void Database::migrate(const std::vector<Migration>& steps) {
  int version = read_user_version(db_, path_);
  for (const Migration& step : steps) {
    if (step.version <= version) continue;
    exec("BEGIN IMMEDIATE");
    try {
      // Another process may have migrated between our read and our lock: re-read under the lock.
      version = read_user_version(db_, path_);
      if (step.version <= version) {
        exec("COMMIT");
        continue;
      }
      if (step.version != version + 1)
        throw DbError(DbErrorKind::kMigration, "schema steps are not consecutive: at version " +
                                                   std::to_string(version) + ", next step is " +
                                                   std::to_string(step.version) + " (a bug: report it)");
      exec(step.sql);
      exec("PRAGMA user_version = " + std::to_string(step.version));
      exec("COMMIT");
      version = step.version;
    } catch (const DbError& e) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      throw DbError(DbErrorKind::kMigration, "updating workspace database " + path_ + " to schema version " +
                                                 std::to_string(step.version) + " (" + step.name +
                                                 ") failed: " + e.what() +
                                                 ". The step was rolled back; the database "
                                                 "is still at version " +
                                                 std::to_string(version) + ".");
    }
  }
}

int Database::schema_version() const { return read_user_version(db_, path_); }

void Database::exec(const std::string& sql) {
  char* err = nullptr;
  const int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    const std::string msg = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    std::string advice;
    if (error_kind_for(rc) == DbErrorKind::kFull)
      advice =
          ". The run database's storage is full or unwritable: free space on its disk or check its "
          "permissions.";
    throw DbError(error_kind_for(rc),
                  msg + " (SQLite code " + std::to_string(rc) + ", database " + path_ + ")" + advice);
  }
}

void Database::write_transaction(const std::function<void()>& body) {
  exec("BEGIN IMMEDIATE");
  try {
    body();
    exec("COMMIT");
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

std::string Database::meta(const std::string& key) const {
  Statement st(db_, "SELECT value FROM meta WHERE key = ?1");
  if (st.prepare_rc() != SQLITE_OK)
    throw DbError(DbErrorKind::kQuery,
                  "reading meta '" + key + "' from " + path_ + ": " + sqlite_message(db_, st.prepare_rc()));
  sqlite3_bind_text(st.get(), 1, key.c_str(), static_cast<int>(key.size()), SQLITE_TRANSIENT);
  const int rc = sqlite3_step(st.get());
  if (rc == SQLITE_ROW) {
    const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(st.get(), 0));
    return text ? text : "";
  }
  if (rc != SQLITE_DONE)
    throw DbError(DbErrorKind::kQuery,
                  "reading meta '" + key + "' from " + path_ + ": " + sqlite_message(db_, rc));
  return "";
}

void Database::set_meta(const std::string& key, const std::string& value) {
  write_tx(*this, [&] {
    Statement st(db_,
                 "INSERT INTO meta(key, value) VALUES (?1, ?2) "
                 "ON CONFLICT(key) DO UPDATE SET value = excluded.value");
    if (st.prepare_rc() != SQLITE_OK)
      throw DbError(DbErrorKind::kQuery,
                    "writing meta '" + key + "' to " + path_ + ": " + sqlite_message(db_, st.prepare_rc()));
    sqlite3_bind_text(st.get(), 1, key.c_str(), static_cast<int>(key.size()), SQLITE_TRANSIENT);
    sqlite3_bind_text(st.get(), 2, value.c_str(), static_cast<int>(value.size()), SQLITE_TRANSIENT);
    const int rc = sqlite3_step(st.get());
    if (rc != SQLITE_DONE)
      throw DbError(DbErrorKind::kQuery,
                    "writing meta '" + key + "' to " + path_ + ": " + sqlite_message(db_, rc));
  });
}

}  // namespace flotilla::db
