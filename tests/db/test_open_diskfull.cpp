// Issue 19, defect 4 (docs/reliability.md D3, D4): the messages of a store that cannot be opened
// for writing, on real file systems. A small tmpfs (needs root or a user namespace; skipped with a
// note otherwise):
// - full disk at open: "the disk holding DIR is full (N bytes free)", kind kFull, not "cannot read
//   ... disk I/O error"; no -wal/-shm left behind; once space is freed the same file opens and
//   holds what it held;
// - the tmpfs remounted read-only: "its folder DIR is not writable (Read-only file system)" for an
//   open that only means to read (what `runs list` does), not "attempt to write a readonly database".
#include <sys/mount.h>

#include <cerrno>
#include <cstring>

#include "db/errors.h"
#include "store_fixture.h"

using namespace flotilla::db;
using namespace store_test;

namespace {

bool contains(const std::string& s, const std::string& w) { return s.find(w) != std::string::npos; }

// The DbError an open throws (kind, message); kind kQuery and "" when it opens.
std::pair<DbErrorKind, std::string> open_error(const std::string& path) {
  try {
    Database db(path);
  } catch (const DbError& e) {
    return {e.kind(), e.what()};
  }
  return {DbErrorKind::kQuery, ""};
}

// Fills the file system holding `dir` until a write fails with ENOSPC.
void fill(const fs::path& dir) {
  std::ofstream f(dir / "filler", std::ios::binary);
  const std::string block(4096, 'x');
  while (f.write(block.data(), block.size())) {
  }
}

}  // namespace

int main() {
  const fs::path mnt = scratch("db_open_diskfull", "mnt");
  if (::mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=1m") != 0) {
    std::printf("test_open_diskfull skipped: cannot mount a tmpfs at %s (%s); needs root\n", mnt.c_str(),
                std::strerror(errno));
    return flotilla_test::summary("test_open_diskfull");
  }
  const std::string path = (mnt / "flotilla.db").string();
  {
    Database db(path);  // created, migrated, WAL; closing removes -wal and -shm
    db.exec("CREATE TABLE IF NOT EXISTS probe_rows(x INTEGER); INSERT INTO probe_rows VALUES (42);");
  }
  CHECK(!fs::exists(path + "-wal") && !fs::exists(path + "-shm"));
  const std::string before = read_bytes(path);

  fill(mnt);
  const auto [kind, msg] = open_error(path);
  CHECK_MSG(kind == DbErrorKind::kFull, "kind %d: %s", static_cast<int>(kind), msg.c_str());
  const std::string full = "the disk holding " + mnt.string();
  CHECK_MSG(contains(msg, full + " is full") && contains(msg, "Free some space"), "%s", msg.c_str());
  CHECK_MSG(msg.rfind("cannot read workspace database", 0) != 0, "%s", msg.c_str());
  for (const char* side : {"-wal", "-shm"})
    CHECK_MSG(!fs::exists(path + side), "%s left behind on a full disk (%lld bytes)", side,
              fs::exists(path + side) ? static_cast<long long>(fs::file_size(path + side)) : -1LL);
  CHECK(read_bytes(path) == before);

  fs::remove(mnt / "filler");
  CHECK(raw_text(path, "SELECT x FROM probe_rows") == "42");
  CHECK(open_error(path).second.empty());

  // Read-only: the same file on the tmpfs remounted read-only.
  CHECK(::mount("tmpfs", mnt.c_str(), "tmpfs", MS_REMOUNT | MS_RDONLY, "size=1m") == 0);
  const auto [ro_kind, ro] = open_error(path);
  CHECK_MSG(ro_kind == DbErrorKind::kOpen && contains(ro, "is not writable (Read-only file system)") &&
                contains(ro, "--workspace DIR") && !contains(ro, "attempt to write a readonly database"),
            "%s", ro.c_str());
  ::umount(mnt.c_str());
  return flotilla_test::summary("test_open_diskfull");
}
