// Multi-process helpers for the communication tests: fork N ranks, each running a function with
// its rank and a fresh rendezvous port, and collect their results in the parent.
//
// The parent never creates threads or sockets of its own before forking (fork copies only the
// calling thread). A child reports through its exit status: 0 = all its CHECKs passed, 1 = some
// failed, 2 = an exception escaped, 3 = it ran past the deadline and was killed by the parent.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "engine/comm/socket_io.h"
#include "engine/comm/tcp_store.h"
#include "engine/core/error.h"
#include "tests/tools/check.h"

namespace comm_test {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct ChildResult {
  int rank = 0;
  pid_t pid = 0;
  int status = 0;  // 0 ok, 1 check failures, 2 exception, 3 killed at the deadline, 4 stopped/killed by us
};

// Forks one child per entry of `ranks` running body(rank, port); waits for all (at most
// deadline_s, then SIGKILL). `on_exit` runs in the parent whenever a child exits, with its rank
// and the pids of all children (e.g. to SIGKILL a stopped rank once the others are done).
inline std::vector<ChildResult> run_ranks(
    const std::vector<int>& ranks, const std::function<void(int rank, int port)>& body,
    double deadline_s = 30,
    const std::function<void(int rank, const std::vector<pid_t>&)>& on_exit = nullptr) {
  // The port stays open from here until rank 0's store adopts it (FLOTILLA_STORE_FD, as under
  // `launch`): a port picked and closed could be taken by a concurrent test's Gloo pair meanwhile.
  int port = 0;
  std::string error;
  const int store_fd = flotilla::comm::listen_tcp("127.0.0.1", 0, &port, &error);
  if (store_fd < 0) throw flotilla::Error(flotilla::ExitCode::kComm, "run_ranks: " + error);
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<ChildResult> results;
  for (int rank : ranks) {
    const pid_t pid = fork();
    if (pid == 0) {
      setenv("OMP_NUM_THREADS", "1", 1);
      if (rank == 0)
        setenv(flotilla::comm::kStoreFdEnv, std::to_string(store_fd).c_str(), 1);
      else
        close(store_fd);
      flotilla_test::checks() = 0;  // count this rank's checks only, not the parent's so far
      flotilla_test::failures() = 0;
      int code = 0;
      try {
        body(rank, port);
        code = flotilla_test::failures() > 0 ? 1 : 0;
        std::printf("  rank %d: %d checks, %d failed\n", rank, flotilla_test::checks(),
                    flotilla_test::failures());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: uncaught exception: %s\n", rank, e.what());
        code = 2;
      }
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(code);
    }
    results.push_back({rank, pid, -1});
  }
  close(store_fd);
  std::vector<pid_t> pids;
  for (const auto& r : results) pids.push_back(r.pid);
  const auto t0 = Clock::now();
  size_t left = results.size();
  while (left > 0) {
    for (auto& r : results) {
      if (r.status != -1) continue;
      int st = 0;
      const pid_t got = waitpid(r.pid, &st, WNOHANG);
      if (got == r.pid) {
        r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 4;
        --left;
        if (on_exit) on_exit(r.rank, pids);
      }
    }
    if (left == 0) break;
    if (seconds_since(t0) > deadline_s) {
      for (auto& r : results) {
        if (r.status != -1) continue;
        kill(r.pid, SIGKILL);
        waitpid(r.pid, nullptr, 0);
        r.status = 3;
        std::fprintf(stderr, "rank %d (pid %d) ran past %.0f s: killed\n", r.rank, r.pid, deadline_s);
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return results;
}

// In a rank-0 body that must bind the port itself: closes the socket run_ranks handed over.
inline void release_store_port() {
  if (const char* fd = std::getenv(flotilla::comm::kStoreFdEnv)) {
    close(std::atoi(fd));
    unsetenv(flotilla::comm::kStoreFdEnv);
  }
}

// Checks (in the parent) that every child passed.
inline void expect_all_ok(const std::vector<ChildResult>& results, const char* scenario) {
  for (const auto& r : results) {
    CHECK_MSG(r.status == 0, "%s: rank %d exited with status %d", scenario, r.rank, r.status);
  }
}

inline std::vector<int> iota_ranks(int n) {
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back(i);
  return v;
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace comm_test
