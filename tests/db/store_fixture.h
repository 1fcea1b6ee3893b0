// Helpers for the run store tests: a scratch folder per test, raw SQLite access, a run to write to.
#pragma once

#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "check.h"
#include "db/database.h"
#include "db/run_store.h"

namespace store_test {

namespace fs = std::filesystem;

inline fs::path scratch(const std::string& test, const std::string& name) {
  const fs::path dir = fs::path(FLOTILLA_TEST_TMP) / (test + "_" + std::to_string(getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

inline std::string read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

inline void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << bytes;
}

// The first column of the first row as text ("" when none); uses its own raw connection.
inline std::string raw_text(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  std::string out;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_busy_timeout(db, 5000);
    sqlite3_stmt* st = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK &&
        sqlite3_step(st) == SQLITE_ROW) {
      const auto* t = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
      out = t ? t : "";
    }
    sqlite3_finalize(st);
  }
  sqlite3_close(db);
  return out;
}

inline long long raw_int(const std::string& path, const std::string& sql) {
  const std::string t = raw_text(path, sql);
  return t.empty() ? -1 : std::stoll(t);
}

inline int64_t make_run(flotilla::db::Database& db, const std::string& name,
                        const std::string& config_json = "{}") {
  flotilla::db::NewRun r;
  r.name = name;
  r.config_json = config_json;
  return flotilla::db::create_run(db, r);
}

}  // namespace store_test
