// The workspace database opens safely (DESIGN.md §5, docs/reliability.md D4): created 0600 with WAL
// and foreign keys, reopened without change, and a damaged or newer file is refused with a clear
// message and left byte-for-byte untouched. Migrations apply step by step, each atomically.
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "check.h"
#include "db/database.h"
#include "db/errors.h"
#include "db/workspace.h"
#include "flotilla/build_info.h"

namespace fs = std::filesystem;
using flotilla::db::Database;
using flotilla::db::DbError;
using flotilla::db::DbErrorKind;

namespace {

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::path(FLOTILLA_TEST_TMP) / ("db_workspace_" + std::to_string(getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << bytes;
}

unsigned mode_of(const fs::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0xffff;
}

// Expects the constructor to throw DbError of `kind` whose message contains every fragment.
void expect_refused(const fs::path& p, DbErrorKind kind, const std::vector<std::string>& fragments,
                    const flotilla::db::OpenOptions& options = {}) {
  ++flotilla_test::checks();
  try {
    Database db(p.string(), options);
    ++flotilla_test::failures();
    std::fprintf(stderr, "%s: opened, expected a refusal\n", p.c_str());
  } catch (const DbError& e) {
    CHECK_MSG(e.kind() == kind, "kind %d, expected %d (%s)", static_cast<int>(e.kind()),
              static_cast<int>(kind), e.what());
    for (const auto& f : fragments)
      CHECK_MSG(std::string(e.what()).find(f) != std::string::npos, "message lacks '%s': %s", f.c_str(),
                e.what());
  }
}

std::string query_text(sqlite3* db, const char* sql) {
  sqlite3_stmt* st = nullptr;
  std::string out;
  if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW) {
    const auto* t = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    out = t ? t : "";
  }
  sqlite3_finalize(st);
  return out;
}

void test_create_and_reopen() {
  const fs::path dir = scratch("create");
  const fs::path path = dir / "flotilla.db";
  {
    ::umask(022);  // a typical umask would give 0644 without our explicit mode
    Database db(path.string());
    CHECK(db.created());
    CHECK(db.schema_version() == flotilla::db::current_schema_version());
    CHECK_MSG(mode_of(path) == 0600, "mode %o", mode_of(path));
    CHECK(query_text(db.handle(), "PRAGMA journal_mode") == "wal");
    CHECK(query_text(db.handle(), "PRAGMA foreign_keys") == "1");
    CHECK(query_text(db.handle(), "PRAGMA busy_timeout") == "5000");
    CHECK(db.meta("created_by_version") == FLOTILLA_VERSION_STRING);
    CHECK(db.meta("created_at").size() == 20);  // 2025-01-01T00:00:00Z
    CHECK(db.meta("no such key").empty());
    db.set_meta("note", "first");
    db.set_meta("note", "second");  // upsert
    CHECK(db.meta("note") == "second");
    // SQLite gives the WAL the database file's mode.
    CHECK_MSG(!fs::exists(path.string() + "-wal") || mode_of(path.string() + "-wal") == 0600, "wal mode %o",
              mode_of(path.string() + "-wal"));
  }
  {
    Database again(path.string());
    CHECK(!again.created());
    CHECK(again.schema_version() == flotilla::db::current_schema_version());
    CHECK(again.meta("note") == "second");
    // Moving keeps the connection usable.
    Database moved = std::move(again);
    CHECK(moved.meta("note") == "second");
  }
  flotilla::db::OpenOptions no_create;
  no_create.create = false;
  expect_refused(dir / "missing.db", DbErrorKind::kOpen, {"missing.db", "does not exist"}, no_create);
  CHECK(!fs::exists(dir / "missing.db"));
}

void test_garbage_is_refused_untouched() {
  const fs::path dir = scratch("garbage");
  const fs::path path = dir / "flotilla.db";
  std::string garbage;
  for (int i = 0; i < 300; ++i) garbage += "not a database, line " + std::to_string(i) + "\n";
  write_bytes(path, garbage);
  ::chmod(path.c_str(), 0640);
  expect_refused(path, DbErrorKind::kDamaged, {path.string(), "damaged", "did not change", "--workspace"});
  CHECK(read_bytes(path) == garbage);
  CHECK(mode_of(path) == 0640);
  CHECK(!fs::exists(path.string() + "-wal"));
  CHECK(!fs::exists(path.string() + "-journal"));
}

void test_corrupt_page_is_refused_untouched() {
  const fs::path dir = scratch("corrupt");
  const fs::path path = dir / "flotilla.db";
  {
    Database db(path.string());
    db.exec("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT); CREATE INDEX t_v ON t(v);");
    db.write_transaction([&] {
      for (int i = 0; i < 2000; ++i)
        db.exec("INSERT INTO t(v) VALUES ('row " + std::to_string(i * 7919 % 2000) + " padding padding')");
    });
    db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
  }
  // Scribble over the middle of the file: the page headers and cells there stop making sense.
  std::string bytes = read_bytes(path);
  CHECK(bytes.size() > 16 * 4096);
  for (size_t i = bytes.size() / 2; i < bytes.size() / 2 + 8192; ++i)
    bytes[i] = static_cast<char>(0xA5 ^ (i * 31));
  write_bytes(path, bytes);
  fs::remove(path.string() + "-wal");
  fs::remove(path.string() + "-shm");
  expect_refused(path, DbErrorKind::kDamaged, {"damaged", "did not change"});
  CHECK(read_bytes(path) == bytes);
}

void test_truncated_file_is_refused_untouched() {
  const fs::path path = scratch("truncated") / "flotilla.db";
  {
    Database db(path.string());
    db.exec("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT)");
    db.write_transaction([&] {
      for (int i = 0; i < 3000; ++i) db.exec("INSERT INTO t(v) VALUES ('row " + std::to_string(i) + "')");
    });
    db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
  }
  const std::string whole = read_bytes(path);
  const std::string half = whole.substr(0, whole.size() / 2);
  write_bytes(path, half);
  fs::remove(path.string() + "-wal");
  fs::remove(path.string() + "-shm");
  expect_refused(path, DbErrorKind::kDamaged, {"damaged", "did not change"});
  CHECK(read_bytes(path) == half);
}

// A valid SQLite file that is not ours: another program's tables, or a forged version number.
void test_foreign_database_is_refused_untouched() {
  const fs::path dir = scratch("foreign");
  const fs::path other = dir / "other.db";
  sqlite3* raw = nullptr;
  CHECK(sqlite3_open(other.c_str(), &raw) == SQLITE_OK);
  CHECK(sqlite3_exec(raw, "CREATE TABLE moz_places(id INTEGER PRIMARY KEY, url TEXT);", nullptr, nullptr,
                     nullptr) == SQLITE_OK);
  sqlite3_close(raw);
  const std::string before = read_bytes(other);
  expect_refused(other, DbErrorKind::kDamaged, {"without a Flotilla schema version", "did not change"});
  CHECK(read_bytes(other) == before);

  const fs::path forged = dir / "forged.db";
  CHECK(sqlite3_open(forged.c_str(), &raw) == SQLITE_OK);
  CHECK(sqlite3_exec(raw, "CREATE TABLE x(a); PRAGMA user_version = 1;", nullptr, nullptr, nullptr) ==
        SQLITE_OK);
  sqlite3_close(raw);
  const std::string forged_before = read_bytes(forged);
  expect_refused(forged, DbErrorKind::kDamaged, {"schema version 1", "lacks its meta table"});
  CHECK(read_bytes(forged) == forged_before);
}

// The user-confirmed way out of D4: the refused file and its WAL move aside together, nothing is
// deleted, and a fresh database opens at the old path.
void test_move_aside() {
  const fs::path dir = scratch("move_aside");
  const fs::path path = dir / "flotilla.db";
  const std::string garbage(4096, 'g');
  write_bytes(path, garbage);
  write_bytes(path.string() + "-wal", "wal bytes");
  const std::string moved = flotilla::db::move_aside(path.string());
  CHECK_MSG(moved.rfind(path.string() + ".damaged-", 0) == 0, "moved to %s", moved.c_str());
  CHECK(!fs::exists(path));
  CHECK(!fs::exists(path.string() + "-wal"));
  CHECK(read_bytes(moved) == garbage);
  CHECK(read_bytes(moved + "-wal") == "wal bytes");
  {
    Database fresh(path.string());
    CHECK(fresh.created());
    CHECK(fresh.schema_version() == flotilla::db::current_schema_version());
  }
  // A second move in the same second gets its own name; the first copy is kept.
  write_bytes(path, garbage);
  fs::remove(path.string() + "-wal");
  fs::remove(path.string() + "-shm");
  const std::string moved_again = flotilla::db::move_aside(path.string());
  CHECK(moved_again != moved);
  CHECK(fs::exists(moved) && fs::exists(moved_again));
  CHECK_THROWS(flotilla::db::move_aside((dir / "absent.db").string()), "cannot move");
}

void test_newer_schema_is_refused_untouched() {
  const fs::path dir = scratch("newer");
  const fs::path path = dir / "flotilla.db";
  sqlite3* raw = nullptr;
  CHECK(sqlite3_open(path.c_str(), &raw) == SQLITE_OK);
  CHECK(sqlite3_exec(raw, "CREATE TABLE future(x); PRAGMA user_version = 42;", nullptr, nullptr, nullptr) ==
        SQLITE_OK);
  sqlite3_close(raw);
  const std::string before = read_bytes(path);
  expect_refused(path, DbErrorKind::kTooNew,
                 {"schema version 42", "up to " + std::to_string(flotilla::db::current_schema_version()),
                  "newer Flotilla", "not changed"});
  CHECK(read_bytes(path) == before);
  CHECK(!fs::exists(path.string() + "-wal"));  // not even switched to WAL
}

// Migrations: each step is atomic with its version bump; an old file is brought forward step by
// step; a failing step leaves the previous version intact.
void test_migrations() {
  const fs::path path = scratch("migrate") / "m.db";
  const std::vector<flotilla::db::Migration> v1 = {{1, "a", "CREATE TABLE a(x INTEGER);"}};
  const std::vector<flotilla::db::Migration> v3 = {
      {1, "a", "CREATE TABLE a(x INTEGER);"},
      {2, "b", "CREATE TABLE b(a_x INTEGER REFERENCES a(x));"},
      {3, "c", "ALTER TABLE a ADD COLUMN y TEXT;"},
  };
  const std::vector<flotilla::db::Migration> broken = {
      v3[0],
      v3[1],
      v3[2],
      {4, "broken", "CREATE TABLE d(x); INSERT INTO no_such_table VALUES (1);"},
  };
  flotilla::db::OpenOptions options;
  options.migrations = &v1;
  { CHECK(Database(path.string(), options).schema_version() == 1); }
  options.migrations = &v3;
  {
    Database db(path.string(), options);
    CHECK(db.schema_version() == 3);
    CHECK(query_text(db.handle(), "SELECT count(*) FROM pragma_table_info('a') WHERE name = 'y'") == "1");
  }
  options.migrations = &broken;
  expect_refused(path, DbErrorKind::kMigration,
                 {"schema version 4", "broken", "no_such_table", "still at version 3"}, options);
  options.migrations = &v3;
  {
    Database db(path.string(), options);
    CHECK(db.schema_version() == 3);
    CHECK(query_text(db.handle(), "SELECT count(*) FROM sqlite_schema WHERE name = 'd'") ==
          "0");  // rolled back
  }
  // A build that knows only v1 refuses the v3 file.
  options.migrations = &v1;
  expect_refused(path, DbErrorKind::kTooNew, {"schema version 3", "up to 1"}, options);
}

void test_workspace_paths() {
  const std::string saved_xdg = std::getenv("XDG_DATA_HOME") ? std::getenv("XDG_DATA_HOME") : "";
  const std::string saved_home = std::getenv("HOME") ? std::getenv("HOME") : "";
  ::setenv("XDG_DATA_HOME", "/srv/data", 1);
  CHECK(flotilla::db::default_workspace_dir() == "/srv/data/flotilla");
  ::setenv("XDG_DATA_HOME", "relative/path", 1);  // the XDG spec says: ignore relative paths
  ::setenv("HOME", "/home/ana", 1);
  CHECK(flotilla::db::default_workspace_dir() == "/home/ana/.local/share/flotilla");
  ::unsetenv("XDG_DATA_HOME");
  CHECK(flotilla::db::default_workspace_dir() == "/home/ana/.local/share/flotilla");
  if (saved_xdg.empty())
    ::unsetenv("XDG_DATA_HOME");
  else
    ::setenv("XDG_DATA_HOME", saved_xdg.c_str(), 1);
  ::setenv("HOME", saved_home.c_str(), 1);

  CHECK(flotilla::db::workspace_database_path("/w") == "/w/flotilla.db");
  CHECK(flotilla::db::workspace_database_path("/w/") == "/w/flotilla.db");

  const fs::path base = scratch("paths");
  const fs::path nested = base / "a" / "b" / "workspace";
  flotilla::db::ensure_workspace_dir(nested.string());
  CHECK(fs::is_directory(nested));
  CHECK_MSG(mode_of(nested) == 0700, "mode %o", mode_of(nested));
  flotilla::db::ensure_workspace_dir(nested.string());  // idempotent
  write_bytes(base / "file", "x");
  CHECK_THROWS(flotilla::db::ensure_workspace_dir((base / "file").string()), "is not a folder");
  CHECK(flotilla::db::sqlite_version() == SQLITE_VERSION);
}

}  // namespace

int main() {
  test_create_and_reopen();
  test_garbage_is_refused_untouched();
  test_corrupt_page_is_refused_untouched();
  test_truncated_file_is_refused_untouched();
  test_foreign_database_is_refused_untouched();
  test_move_aside();
  test_newer_schema_is_refused_untouched();
  test_migrations();
  test_workspace_paths();
  return flotilla_test::summary("test_workspace_db");
}
