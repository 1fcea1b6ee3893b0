// The second audit's D16: several processes opening a store that does not exist yet, at the same
// moment, all succeed, and the file they make is a valid store at the current schema version.
// Before the fix about 1 in 60 such opens failed: one read the schema version before another
// process's first step committed and its tables after ("an SQLite database without a Flotilla
// schema version"), or SQLite answered the switch to write-ahead logging with "database is locked"
// at once. Real processes (fork), released together by closing a pipe, over many rounds
// (FLOTILLA_D16_ROUNDS, default 50) of 4 openers on a fresh path each.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "db/database.h"
#include "db/errors.h"
#include "db/run_store.h"
#include "store_fixture.h"

using namespace flotilla::db;
using namespace store_test;

int main() {
  const fs::path dir = scratch("db_concurrent_create_d16", "all");
  const char* env = std::getenv("FLOTILLA_D16_ROUNDS");
  const int rounds = env ? std::atoi(env) : 50;
  constexpr int kOpeners = 4;
  int failed = 0;
  for (int round = 0; round < rounds; ++round) {
    const fs::path path = dir / ("fresh-" + std::to_string(round) + ".db");
    int gate[2];
    CHECK(::pipe(gate) == 0);
    std::vector<pid_t> kids;
    for (int k = 0; k < kOpeners; ++k) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::close(gate[1]);
        char c;
        while (::read(gate[0], &c, 1) > 0) {
        }  // EOF: every opener starts now
        int code = 0;
        try {
          Database db(path.string());
          if (db.schema_version() != current_schema_version()) code = 2;
        } catch (const DbError& e) {
          std::fprintf(stderr, "round %d opener %d: %s\n", round, k, e.what());
          code = 1;
        }
        std::fflush(stderr);
        ::_exit(code);
      }
      kids.push_back(pid);
    }
    ::close(gate[0]);
    ::close(gate[1]);
    for (const pid_t pid : kids) {
      int status = 0;
      ::waitpid(pid, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
    }
    // The file is a valid store (the open re-checks integrity and identity).
    Database db(path.string());
    CHECK(db.schema_version() == current_schema_version());
    CHECK(raw_text(path.string(), "PRAGMA quick_check") == "ok");
    CHECK(raw_text(path.string(), "PRAGMA journal_mode") == "wal");
  }
  CHECK_MSG(failed == 0, "%d of %d first opens failed", failed, rounds * kOpeners);
  std::printf("%d rounds x %d processes opening a fresh store at once: %d failed\n", rounds, kOpeners,
              failed);
  return flotilla_test::summary("test_concurrent_create_d16");
}
