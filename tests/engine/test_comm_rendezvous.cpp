// Rendezvous and the TCP store.
// Real processes: ranks that never start are named ("waiting for ranks 2,3 of 4"), a missing
// rank 0 too; a rank 0 that starts late is waited for; WORLD_SIZE disagreement, a duplicate RANK
// and a busy port are clear errors. In-process: the store's set/get/add/check/wait semantics,
// blocking get, timeouts naming the missing keys, concurrent counters, large values, frames split
// into single bytes, a garbage client, a listener that is not a store, a server that goes away
// during a wait (error at once, not at the timeout), and the torchrun environment parser.
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "engine/comm/process_group.h"
#include "engine/comm/rendezvous.h"
#include "engine/comm/socket_io.h"
#include "engine/comm/tcp_store.h"
#include "engine/comm/tcp_store_wire.h"
#include "tests/engine/test_comm_util.h"

using namespace flotilla::comm;
using comm_test::contains;
using flotilla::Error;

namespace {

// Runs init_process_group expecting a rendezvous error with `part`; checks the time it took.
void expect_rendezvous_error(int rank, int world, int port, Millis timeout, const std::string& part,
                             double min_s, double max_s) {
  const auto t0 = comm_test::Clock::now();
  std::string message;
  try {
    init_process_group("gloo", rank, world, "127.0.0.1", port, timeout);
  } catch (const Error& e) {
    message = e.what();
    CHECK(e.code() == flotilla::ExitCode::kComm);
  }
  const double s = comm_test::seconds_since(t0);
  CHECK_MSG(contains(message, part), "rank %d: '%s' lacks '%s'", rank, message.c_str(), part.c_str());
  CHECK_MSG(s >= min_s && s <= max_s, "rank %d: failed after %.2f s, expected %.1f..%.1f", rank, s, min_s,
            max_s);
  std::printf("  rank %d after %.2f s: %s\n", rank, s, message.c_str());
}

void multi_process() {
  comm_test::expect_all_ok(comm_test::run_ranks({0, 1},
                                                [](int rank, int port) {
                                                  expect_rendezvous_error(
                                                      rank, 4, port, Millis(1000),
                                                      "rendezvous: waiting for ranks 2,3 of 4 at 127.0.0.1:" +
                                                          std::to_string(port) + " for 1 s",
                                                      0.9, 2.5);
                                                }),
                           "ranks 2,3 never start");
  comm_test::expect_all_ok(
      comm_test::run_ranks({1},
                           [](int rank, int port) {
                             expect_rendezvous_error(
                                 rank, 2, port, Millis(1000),
                                 "waiting for rank 0 of 2 at 127.0.0.1:" + std::to_string(port) + " for 1 s",
                                 0.9, 2.5);
                           }),
      "rank 0 never starts");
  // Rank 0 starts 600 ms after rank 1: rank 1 keeps retrying.
  comm_test::expect_all_ok(
      comm_test::run_ranks({0, 1},
                           [](int rank, int port) {
                             if (rank == 0) std::this_thread::sleep_for(std::chrono::milliseconds(600));
                             auto pg = init_process_group("gloo", rank, 2, "127.0.0.1", port, Millis(10000));
                             float x = 1;
                             pg->all_reduce(&x, 1);
                             CHECK(x == 2);
                           }),
      "late rank 0");
  comm_test::expect_all_ok(
      comm_test::run_ranks(
          {0, 1},
          [](int rank, int port) {
            if (rank == 1) {
              expect_rendezvous_error(rank, 3, port, Millis(5000),
                                      "was started with WORLD_SIZE=3 but rank 0 hosts a run of 2", 0, 4);
            } else {
              expect_rendezvous_error(rank, 2, port, Millis(1000), "waiting for rank 1 of 2", 0.9, 2.5);
            }
          }),
      "WORLD_SIZE mismatch");
  // Two processes with RANK=1: one is told, the others wait for the missing rank 2.
  const auto dup = comm_test::run_ranks({0, 1, 1}, [](int rank, int port) {
    try {
      init_process_group("gloo", rank, 3, "127.0.0.1", port, Millis(1000));
    } catch (const Error& e) {
      if (contains(e.what(), "checked in twice: two processes were started with RANK=1")) _exit(5);
      // A waiting rank reports the missing rank, unless rank 0 (the store's host) timed out and
      // exited first: then the store connection closes under it, which its message says. Both are
      // correct under load; what matters is that no rank hangs and the duplicate is named once.
      CHECK_MSG(
          contains(e.what(), "waiting for rank 2 of 3") ||
              (rank != 0 && contains(e.what(), "connection closed by the peer (rank 0 exited or crashed?)")),
          "%s", e.what());
    }
  });
  int twice = 0;
  for (const auto& r : dup) {
    twice += r.status == 5;
    CHECK(r.status == 0 || r.status == 5);
  }
  CHECK(twice == 1);
  // The port is taken by another program.
  comm_test::expect_all_ok(comm_test::run_ranks({0},
                                                [](int, int port) {
                                                  comm_test::release_store_port();
                                                  std::string err;
                                                  int bound = 0;
                                                  const int fd = listen_tcp("127.0.0.1", port, &bound, &err);
                                                  CHECK(fd >= 0);
                                                  expect_rendezvous_error(0, 2, port, Millis(1000),
                                                                          "is already in use", 0, 1);
                                                  close(fd);
                                                }),
                           "busy port");
}

void store_semantics() {
  TcpStoreServer server("127.0.0.1", 0);
  const int port = server.port();
  TcpStore a("127.0.0.1", port, Millis(5000)), b("127.0.0.1", port, Millis(5000));
  a.set("k", std::string("v1"));
  CHECK(b.get_string("k", Millis(100)) == "v1");
  a.set("k", std::string("v2"));  // overwrite
  CHECK(b.get_string("k", Millis(100)) == "v2");
  CHECK(a.check({"k"}) && !a.check({"k", "nope"}));
  CHECK(a.add("n", 5) == 5 && b.add("n", -2) == 3);
  CHECK(b.get_string("n", Millis(100)) == "3");
  // A blocking get is answered when another client sets the key.
  std::thread setter([port] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    TcpStore c("127.0.0.1", port, Millis(5000));
    c.set("late", std::string("here"));
  });
  const auto t0 = comm_test::Clock::now();
  CHECK(a.get_string("late", Millis(5000)) == "here");
  const double waited = comm_test::seconds_since(t0);
  CHECK_MSG(waited >= 0.15 && waited < 2.0, "blocking get took %.2f s", waited);
  setter.join();
  // Timeouts name the missing keys.
  const auto missing = a.wait_missing({"k", "zz", "yy"}, Millis(300));
  CHECK(missing == (std::vector<std::string>{"zz", "yy"}));
  CHECK_THROWS(a.wait({"zz"}, Millis(200)), "waited 0.2 s for zz");
  CHECK_THROWS(a.get("zz", Millis(200)), "for zz");
  // The connection survives a timed-out wait.
  CHECK(a.get_string("k", Millis(100)) == "v2");
  // Concurrent counters from several connections.
  std::vector<std::thread> adders;
  for (int t = 0; t < 4; ++t) {
    adders.emplace_back([port] {
      TcpStore c("127.0.0.1", port, Millis(5000));
      for (int i = 0; i < 200; ++i) c.add("counter", 1);
    });
  }
  for (auto& t : adders) t.join();
  CHECK(a.add("counter", 0) == 800);
  // A 1 MiB value with every byte value.
  std::vector<char> big(1 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 + 3);
  a.set("big", big);
  CHECK(b.get("big", Millis(1000)) == big);
  // Non-counter add is refused, not a crash.
  CHECK_THROWS(a.add("k", 1), "not a counter");
  CHECK(a.get_string("k", Millis(100)) == "v2");  // and the connection stays usable
}

void store_robustness() {
  auto server = std::make_unique<TcpStoreServer>("127.0.0.1", 0);
  const int port = server->port();
  TcpStore good("127.0.0.1", port, Millis(5000));
  good.set("x", std::string("1"));
  // A garbage client is dropped; the others keep working.
  {
    std::string err;
    const int fd = connect_tcp("127.0.0.1", port, comm_test::Clock::now() + Millis(1000), &err);
    CHECK(fd >= 0);
    const char* junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK(send_all(fd, junk, std::strlen(junk), comm_test::Clock::now() + Millis(1000)).ok());
    char c;
    const IoStatus st = recv_all(fd, &c, 1, comm_test::Clock::now() + Millis(2000));
    CHECK(st.kind == IoStatus::kClosed);
    close(fd);
  }
  CHECK(good.get_string("x", Millis(100)) == "1");
  // A HELLO sent one byte at a time is reassembled.
  {
    std::string err;
    const int fd = connect_tcp("127.0.0.1", port, comm_test::Clock::now() + Millis(1000), &err);
    wire::Writer hello(wire::kHello);
    hello.str(std::string(wire::kMagic));
    hello.u32(wire::kVersion);
    const std::string frame = hello.frame();
    for (char ch : frame) {
      CHECK(send_all(fd, &ch, 1, comm_test::Clock::now() + Millis(1000)).ok());
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    char reply[5];
    CHECK(recv_all(fd, reply, 5, comm_test::Clock::now() + Millis(2000)).ok());
    CHECK(reply[0] == 1 && reply[4] == wire::kOk);
    close(fd);
  }
  // A listener that is not our store.
  {
    std::string err;
    int other_port = 0;
    const int lfd = listen_tcp("127.0.0.1", 0, &other_port, &err);
    std::atomic<bool> stop{false};
    std::thread acceptor([&] {
      while (!stop) {
        const int c = accept(lfd, nullptr, nullptr);
        if (c >= 0) {
          const char* banner = "SSH-2.0-OpenSSH_9.2\r\n";
          send(c, banner, std::strlen(banner), MSG_NOSIGNAL);
          close(c);
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
      }
    });
    CHECK_THROWS(TcpStore("127.0.0.1", other_port, Millis(2000)), "is not a Flotilla rendezvous store");
    stop = true;
    acceptor.join();
    close(lfd);
  }
  // Nothing listening: retries until the timeout, then says where it looked.
  {
    const int free_port = find_free_port();
    const auto t0 = comm_test::Clock::now();
    CHECK_THROWS(TcpStore("127.0.0.1", free_port, Millis(400)),
                 ("could not reach the store of rank 0 at 127.0.0.1:" + std::to_string(free_port)).c_str());
    CHECK(comm_test::seconds_since(t0) >= 0.35);
  }
  // A client that starts before the server.
  {
    const int late_port = find_free_port();
    std::unique_ptr<TcpStoreServer> late;
    std::thread starter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      late = std::make_unique<TcpStoreServer>("127.0.0.1", late_port);
    });
    TcpStore early("127.0.0.1", late_port, Millis(5000));
    starter.join();
    early.set("ok", std::string("1"));
    CHECK(early.check({"ok"}));
  }
  // The server goes away during a wait: the waiter fails at once, not at its 10 s timeout.
  std::string message;
  std::thread waiter([&] {
    try {
      good.wait({"never"}, Millis(10000));
    } catch (const Error& e) {
      message = e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto t0 = comm_test::Clock::now();
  server.reset();
  waiter.join();
  CHECK_MSG(comm_test::seconds_since(t0) < 2.0, "waiter noticed after %.2f s", comm_test::seconds_since(t0));
  CHECK_MSG(contains(message, "wait for never") && contains(message, "rank 0 exited or crashed"), "%s",
            message.c_str());
  CHECK_THROWS(good.set("y", std::string("2")), "failed earlier");
}

void environment() {
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"})
    unsetenv(v);
  DistEnv env = dist_env_from_environment();
  CHECK(env.world_size == 1 && env.rank == 0 && !env.distributed && env.master_port == 29500);
  setenv("RANK", "3", 1);
  setenv("WORLD_SIZE", "4", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("LOCAL_WORLD_SIZE", "2", 1);
  setenv("MASTER_ADDR", "10.1.2.3", 1);
  setenv("MASTER_PORT", "29611", 1);
  env = dist_env_from_environment();
  CHECK(env.rank == 3 && env.world_size == 4 && env.local_rank == 1 && env.local_world_size == 2);
  CHECK(env.master_addr == "10.1.2.3" && env.master_port == 29611 && env.distributed);
  setenv("RANK", "4", 1);
  CHECK_THROWS(dist_env_from_environment(), "RANK='4' is not an integer in 0..3");
  setenv("RANK", "0", 1);
  setenv("MASTER_PORT", "http", 1);
  CHECK_THROWS(dist_env_from_environment(), "MASTER_PORT='http'");
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"})
    unsetenv(v);
  // A one-rank world needs no store at all.
  auto solo = init_process_group("gloo", 0, 1, "127.0.0.1", 1, Millis(1000));
  std::vector<float> v(3, 2.0f), out(3);
  solo->all_reduce(v.data(), v.size());
  solo->reduce_scatter(v.data(), out.data(), 3);
  CHECK(v[2] == 2.0f && out[0] == 2.0f && solo->size() == 1);
  CHECK_THROWS(init_process_group("mpi", 0, 2, "127.0.0.1", 1, Millis(1000)), "use auto, gloo or nccl");
}

}  // namespace

int main() {
  const auto t0 = comm_test::Clock::now();
  multi_process();  // first: fork before this process has any thread
  std::printf("multi-process rendezvous: %.2f s\n", comm_test::seconds_since(t0));
  store_semantics();
  store_robustness();
  environment();
  std::printf("total %.2f s\n", comm_test::seconds_since(t0));
  return flotilla_test::summary("test_comm_rendezvous");
}
