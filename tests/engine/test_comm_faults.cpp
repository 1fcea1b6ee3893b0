// Peer failures at the ProcessGroup layer (docs/reliability.md C5, C6), with real Gloo processes:
// - a peer that dies while the others are inside a collective, or in the middle of a message: the
//   survivors get Error(kComm) naming the op, its sequence number and the peer, long before the
//   timeout (no hang); with 3 ranks both survivors fail fast;
// - the group is poisoned: the next operation fails at once with the original cause;
// - a stopped peer (SIGSTOP): a timeout error within timeout + margin, and while it waits the
//   last-collective record names the stuck op ("all_reduce #2 ... running for 1 s");
// - ranks that disagree on a collective (different sizes) time out with a hint instead of
//   crashing inside Gloo.
// No child outlives the test (checked with waitpid).
#include <signal.h>

#include <thread>
#include <vector>

#include "engine/comm/process_group.h"
#include "engine/comm/rendezvous.h"
#include "tests/engine/test_comm_util.h"

using namespace flotilla::comm;
using flotilla::Error;
using flotilla::ExitCode;

namespace {

// Runs fn, expecting Error(kComm) whose message has every part; returns the seconds it took.
template <typename F>
double expect_comm_error(F fn, const std::vector<std::string>& parts, const char* what) {
  const auto t0 = comm_test::Clock::now();
  bool thrown = false;
  try {
    fn();
  } catch (const Error& e) {
    thrown = true;
    CHECK_MSG(e.code() == ExitCode::kComm, "%s: exit code %d", what, static_cast<int>(e.code()));
    for (const auto& p : parts)
      CHECK_MSG(comm_test::contains(e.what(), p), "%s: '%s' lacks '%s'", what, e.what(), p.c_str());
    std::printf("  %s: %s\n", what, e.what());
  }
  CHECK_MSG(thrown, "%s: no error", what);
  return comm_test::seconds_since(t0);
}

// The last rank dies while the others wait inside all_reduce #2 (it never joins it): every
// survivor gets the error long before the 20 s timeout, naming the op; with 3 ranks the failure
// cascades to the rank that was not talking to the dead one.
void dead_peer(int n, int rank, int port) {
  auto pg = init_process_group("gloo", rank, n, "127.0.0.1", port, Millis(20000));
  std::vector<float> v(1000, 1.0f);
  pg->all_reduce(v.data(), v.size());
  if (rank == n - 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    _exit(0);
  }
  const std::string label =
      "all_reduce #2 on group world (rank " + std::to_string(rank) + " of " + std::to_string(n) + ")";
  const double s =
      expect_comm_error([&] { pg->all_reduce(v.data(), v.size()); }, {label, "closed"}, "dead peer");
  CHECK_MSG(s > 0.2 && s < 3.0, "the error took %.2f s (peer died at 0.3 s, timeout 20 s)", s);
  const CollectiveRecord rec = pg->last_record();
  CHECK(rec.finished && rec.failed && rec.seq == 2);
  // The group is poisoned: the next operation fails at once, citing the first failure.
  const double s2 = expect_comm_error([&] { pg->barrier(); },
                                      {"barrier #3", "failed earlier", "all_reduce #2"}, "after failure");
  CHECK(s2 < 0.5);
}

void dead_peer_named(int rank, int port) {
  auto pg = init_process_group("gloo", rank, 2, "127.0.0.1", port, Millis(20000));
  std::vector<float> v(1000, 1.0f);
  pg->all_reduce(v.data(), v.size());
  if (rank == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    _exit(0);
  }
  expect_comm_error([&] { pg->all_reduce(v.data(), v.size()); },
                    {"all_reduce #2 on group world (rank 0 of 2): peer rank 1 closed the connection"},
                    "dead peer, 2 ranks");
}

// The peer dies in the middle of a large all_reduce (most runs: mid-message, the case Gloo alone
// does not report; see gloo_peer_watch.h). Whether the survivor's all_reduce or its next operation
// fails depends on timing; either way the first error comes at once and names the peer.
void dead_peer_mid_message(int rank, int port) {
  auto pg = init_process_group("gloo", rank, 2, "127.0.0.1", port, Millis(20000));
  std::vector<float> v(1 << 24, 0.0f);
  pg->all_reduce(v.data(), 1000);
  if (rank == 1) {
    auto w = pg->all_reduce_async(v.data(), v.size());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    _exit(0);
  }
  const double s = expect_comm_error(
      [&] {
        pg->all_reduce(v.data(), v.size());
        pg->barrier();
      },
      {"on group world (rank 0 of 2)", "peer rank 1 closed the connection"}, "dead peer mid-message");
  CHECK_MSG(s < 3.0, "the error took %.2f s (timeout 20 s)", s);
}

void stopped_peer(int rank, int port) {
  auto pg = init_process_group("gloo", rank, 2, "127.0.0.1", port, Millis(20000));
  std::vector<float> v(1000, 1.0f);
  pg->all_reduce(v.data(), v.size());
  if (rank == 1) {
    raise(SIGSTOP);  // the parent SIGKILLs us once rank 0 is done
    _exit(9);
  }
  const auto t0 = comm_test::Clock::now();
  auto work = pg->all_reduce_async(v.data(), v.size(), Millis(2000));
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  const CollectiveRecord rec = pg->last_record();
  CHECK(rec.started && !rec.finished && rec.op == "all_reduce" && rec.seq == 2 && rec.seconds >= 0.9);
  CHECK_MSG(comm_test::contains(rec.describe(), "all_reduce #2 on group world (rank 0 of 2) running for"),
            "%s", rec.describe().c_str());
  const auto all = collective_records();
  CHECK(!all.empty() && all[0].seq == 2 && !all[0].finished);
  expect_comm_error([&] { work->wait(); },
                    {"all_reduce #2", "timed out after 2 s waiting for data from peer rank 1"},
                    "stopped peer");
  const double s = comm_test::seconds_since(t0);
  CHECK_MSG(s >= 1.9 && s < 3.5, "timeout 2 s reported after %.2f s", s);
  CHECK(pg->last_record().failed);
}

void mismatch(int rank, int port) {
  auto pg = init_process_group("gloo", rank, 2, "127.0.0.1", port, Millis(20000));
  std::vector<float> v(1000, 1.0f);
  std::string message;
  try {
    pg->all_reduce(v.data(), rank == 0 ? 1000 : 999, Millis(1000));
  } catch (const Error& e) {
    message = e.what();
  }
  // The first rank to time out aborts the group, so the other may see the closed connection.
  CHECK_MSG(
      comm_test::contains(message, "all_reduce #1") &&
          (comm_test::contains(message, "different collective") || comm_test::contains(message, "closed")),
      "size mismatch: '%s'", message.c_str());
  std::printf("  size mismatch: %s\n", message.c_str());
}

}  // namespace

int main() {
  auto t0 = comm_test::Clock::now();
  comm_test::expect_all_ok(comm_test::run_ranks({0, 1}, dead_peer_named), "dead peer, 2 ranks");
  comm_test::expect_all_ok(comm_test::run_ranks({0, 1}, dead_peer_mid_message), "dead peer mid-message");
  for (int n : {2, 3}) {
    comm_test::expect_all_ok(
        comm_test::run_ranks(comm_test::iota_ranks(n), [n](int rank, int port) { dead_peer(n, rank, port); }),
        "dead peer in a collective");
  }
  std::printf("dead peers: %.2f s\n", comm_test::seconds_since(t0));

  t0 = comm_test::Clock::now();
  const auto stopped =
      comm_test::run_ranks({0, 1}, stopped_peer, 30, [](int rank, const std::vector<pid_t>& pids) {
        if (rank == 0) kill(pids[1], SIGKILL);  // clean up the stopped rank
      });
  CHECK_MSG(stopped[0].status == 0, "stopped peer: rank 0 status %d", stopped[0].status);
  CHECK_MSG(stopped[1].status == 4, "stopped peer: rank 1 status %d (expected killed)", stopped[1].status);
  std::printf("stopped peer: %.2f s\n", comm_test::seconds_since(t0));

  t0 = comm_test::Clock::now();
  comm_test::expect_all_ok(comm_test::run_ranks({0, 1}, mismatch), "mismatch");
  std::printf("mismatch: %.2f s\n", comm_test::seconds_since(t0));

  // No orphans: every child was reaped.
  CHECK(waitpid(-1, nullptr, WNOHANG) == -1 && errno == ECHILD);
  return flotilla_test::summary("test_comm_faults");
}
