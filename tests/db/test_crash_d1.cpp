// docs/reliability.md D1: a process writing metrics at full rate through the Writer is SIGKILLed at
// random points. After every kill: PRAGMA integrity_check is ok, every step the child reported as
// acknowledged (written to a pipe after its ticket committed) is present, and no transaction is
// half there (each step's 14 rows and the block summaries agree). FLOTILLA_D1_ROUNDS overrides
// the round count (the `slow` variant runs 200).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>

#include "db/sql.h"
#include "db/writer.h"
#include "store_fixture.h"

using namespace flotilla::db;
using namespace store_test;

namespace {

constexpr int kNamesPerStep = 14;
constexpr int kStepsPerBatch = 50;

// The child: appends batches forever; reports the last step of batch b once batch b committed.
[[noreturn]] void child_main(const std::string& path, int64_t run, int64_t first_step, int report_fd) {
  try {
    Writer w(path);
    std::vector<std::pair<Ticket, int64_t>> pending;
    for (int64_t step = first_step;;) {
      std::vector<MetricRow> rows;
      for (int i = 0; i < kStepsPerBatch; ++i, ++step)
        for (int n = 0; n < kNamesPerStep; ++n)
          rows.push_back({run, "m" + std::to_string(n), step, static_cast<double>(step) * 0.5 + n, 1.7e9});
      pending.emplace_back(w.append(std::move(rows)), step - 1);
      while (pending.size() > 3) {  // keep the queue busy, acknowledge in order
        if (!w.wait(pending.front().first)) _exit(3);
        const std::string line = std::to_string(pending.front().second) + "\n";
        if (::write(report_fd, line.data(), line.size()) < 0) _exit(4);
        pending.erase(pending.begin());
      }
    }
  } catch (...) {
    _exit(2);
  }
}

int64_t read_last_acked(int fd) {
  std::string all;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) all.append(buf, static_cast<size_t>(n));
  int64_t last = 0;
  size_t end = all.rfind('\n');
  if (end == std::string::npos) return 0;
  size_t start = all.rfind('\n', end - 1);
  start = start == std::string::npos ? 0 : start + 1;
  last = std::stoll(all.substr(start, end - start));
  return last;
}

}  // namespace

int main() {
  const char* env = std::getenv("FLOTILLA_D1_ROUNDS");
  const int rounds = env ? std::atoi(env) : 50;
  const fs::path dir = scratch("db_crash_d1", "rounds");
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> delay_ms(5, 120);
  int64_t total_acked_checks = 0;
  for (int round = 0; round < rounds; ++round) {
    // A new file every 10 rounds keeps integrity_check fast while each file sees many crashes.
    const std::string path = (dir / ("d1-" + std::to_string(round / 10) + ".db")).string();
    int64_t run = 0, first_step = 1;
    {
      Database db(path);  // also recovers the WAL a killed writer left behind
      if (auto r = find_run(db, "d1")) {
        run = r->id;
        first_step = query_int(db, "SELECT coalesce(max(step), 0) + 1 FROM metrics WHERE name = 'm0'");
      } else {
        run = make_run(db, "d1");
      }
    }
    int fds[2];
    CHECK(::pipe(fds) == 0);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      child_main(path, run, first_step, fds[1]);
    }
    ::close(fds[1]);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(rng)));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    CHECK_MSG(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "round %d: child exited %d before the kill",
              round, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    const int64_t acked = read_last_acked(fds[0]);
    ::close(fds[0]);

    CHECK_MSG(raw_text(path, "PRAGMA integrity_check") == "ok", "round %d: integrity_check failed", round);
    const long long max_step = raw_int(path, "SELECT coalesce(max(step), 0) FROM metrics WHERE name = 'm0'");
    CHECK_MSG(max_step >= acked, "round %d: acknowledged step %lld missing (max %lld)", round,
              static_cast<long long>(acked), max_step);
    // Whole transactions only: every step has all its rows, and blocks agree with rows.
    const long long rows = raw_int(path, "SELECT count(*) FROM metrics");
    CHECK_MSG(rows == max_step * kNamesPerStep, "round %d: %lld rows for %lld steps", round, rows, max_step);
    const long long block_rows = raw_int(path, "SELECT coalesce(sum(count), 0) FROM metric_blocks");
    CHECK_MSG(block_rows == rows, "round %d: blocks count %lld rows, table has %lld", round, block_rows,
              rows);
    total_acked_checks += acked > 0;
  }
  // The kills must land while writing, not only before the first commit.
  CHECK_MSG(total_acked_checks >= rounds / 2, "only %lld of %d rounds acknowledged anything",
            static_cast<long long>(total_acked_checks), rounds);
  return flotilla_test::summary("test_crash_d1");
}
