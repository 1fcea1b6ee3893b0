// The rendezvous port of `launch --master-port 0` is never free for another program to take.
//
// A CI run once failed two layout tests at once: the launcher picked a free port, closed it, and
// before rank 0 bound it a Gloo pair of a concurrent test listened there; rank 1 of one run then
// met "not a Flotilla rendezvous store", and the Gloo pair, having accepted that stranger, refused
// its real peer. The launcher now opens the store's socket itself and hands it to rank 0
// (FLOTILLA_STORE_FD). This test checks:
//  1. TcpStoreServer adopts an inherited listening socket bound to its port (a client then sets and
//     gets through it) and consumes the variable; a socket on another port, a descriptor that is not
//     a listening socket, or garbage are ignored and the server binds the port itself.
//  2. Under run_launch with /bin/sh ranks: the port is LISTENing before rank 0 has run a line of
//     code (read from /proc/net/tcp by rank 1), only rank 0 receives the descriptor, and a second
//     program cannot bind the port while the ranks run.
//  3. The real worker from a bare shell (nothing open above stderr) trains on two ranks.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "engine/comm/socket_io.h"
#include "engine/comm/tcp_store.h"
#include "engine/core/error.h"
#include "engine/launch/launcher.h"
#include "worker_run.h"

using namespace flotilla;
using namespace flotilla_test;

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// True when nothing else may bind 127.0.0.1:port right now.
bool port_taken(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  const bool taken = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0;
  close(fd);
  return taken;
}

void test_adopt() {
  std::string error;
  int port = 0;
  const int fd = comm::listen_tcp("127.0.0.1", 0, &port, &error);
  CHECK_MSG(fd > 2, "%s", error.c_str());
  setenv(comm::kStoreFdEnv, std::to_string(fd).c_str(), 1);
  {
    comm::TcpStoreServer server("127.0.0.1", port);
    CHECK(server.port() == port);
    CHECK_MSG(std::getenv(comm::kStoreFdEnv) == nullptr, "the variable must be consumed");
    comm::TcpStore client("127.0.0.1", port, comm::Millis(5000));
    client.set("k", "v");
    CHECK(client.get_string("k", comm::Millis(1000)) == "v");
    CHECK(client.add("n", 2) == 2);
  }
  // The server owned the socket and closed it: the port is free again.
  CHECK(!port_taken(port));

  // A listening socket on another port is not the one asked for: the server binds its own port.
  int other_port = 0;
  const int other = comm::listen_tcp("127.0.0.1", 0, &other_port, &error);
  const int wanted = comm::find_free_port();
  setenv(comm::kStoreFdEnv, std::to_string(other).c_str(), 1);
  {
    comm::TcpStoreServer server("127.0.0.1", wanted);
    CHECK(server.port() == wanted);
    CHECK(port_taken(other_port));  // left alone, still open
    comm::TcpStore client("127.0.0.1", wanted, comm::Millis(5000));
    client.set("k", "w");
    CHECK(client.get_string("k", comm::Millis(1000)) == "w");
  }
  close(other);

  // A descriptor that is not a listening socket, and a variable that is not a number.
  const int file = open("/dev/null", O_RDONLY | O_CLOEXEC);
  for (const std::string& value : {std::to_string(file), std::string("banana"), std::string("-3")}) {
    setenv(comm::kStoreFdEnv, value.c_str(), 1);
    const int p = comm::find_free_port();
    comm::TcpStoreServer server("127.0.0.1", p);
    CHECK_MSG(server.port() == p, "FLOTILLA_STORE_FD=%s", value.c_str());
    CHECK(fcntl(file, F_GETFD) >= 0);  // not closed by the server
  }
  close(file);
}

void test_launch_holds_port(const std::string& dir) {
  const std::string log_path = dir + "/launch.log";
  std::FILE* log = std::fopen(log_path.c_str(), "w");
  LaunchOptions o;
  o.nproc_per_node = 2;
  o.master_port = 0;
  o.bind_cores = false;
  o.init_timeout_s = 30;
  o.worker_binary = "/bin/sh";
  // Rank 1 looks for a LISTEN socket (state 0A) on MASTER_PORT in /proc/net/tcp at once; rank 0
  // reports whether its descriptor is a socket, then both wait for the test's go-ahead file.
  o.worker_args = {
      "-c",
      "hex=$(printf '%04X' \"$MASTER_PORT\"); "
      "if [ \"$RANK\" = 1 ]; then "
      "  if grep -q \":$hex 00000000:0000 0A\" /proc/net/tcp; then echo 'rank1 saw LISTEN' >&2; "
      "  else echo 'rank1 saw nothing' >&2; fi; "
      "  echo \"rank1 store_fd=${FLOTILLA_STORE_FD-unset}\" >&2; "
      "else "
      "  if [ -S \"/proc/self/fd/${FLOTILLA_STORE_FD-x}\" ]; then echo 'rank0 holds a socket' >&2; fi; "
      "fi; "
      "echo \"$MASTER_PORT\" > " +
          dir +
          "/port-$RANK; "
          "i=0; while [ ! -e " +
          dir + "/go ] && [ $i -lt 300 ]; do sleep 0.05; i=$((i+1)); done"};
  o.log = log;
  std::filesystem::remove(dir + "/go");
  int code = -1;
  std::thread runner([&] {
    try {
      code = run_launch(o);
    } catch (const Error& e) {
      code = static_cast<int>(e.code());
    }
  });
  // While the ranks wait, the port cannot be bound by anyone else.
  for (int i = 0; i < 300 && !std::filesystem::exists(dir + "/port-1"); ++i) usleep(50000);
  const std::string text = read_file(dir + "/port-1");
  const int port = std::atoi(text.c_str());
  CHECK_MSG(port > 0, "no port from rank 1: '%s'", text.c_str());
  if (port > 0) CHECK_MSG(port_taken(port), "port %d was free while the ranks ran", port);
  write_text(dir + "/go", "");
  runner.join();
  std::fclose(log);
  const std::string out = read_file(log_path);
  CHECK_MSG(code == 0, "exit %d\n%s", code, out.c_str());
  CHECK_MSG(has(out, "rank1 saw LISTEN"), "%s", out.c_str());
  CHECK_MSG(has(out, "rank0 holds a socket"), "%s", out.c_str());
  CHECK_MSG(has(out, "rank1 store_fd=unset"), "%s", out.c_str());
  // The attempt is over: the launcher closed its copy.
  if (port > 0) CHECK_MSG(!port_taken(port), "port %d still held after the launch", port);
}

// The real worker started with nothing open above stderr (as from a shell): its store socket is the
// lowest free descriptor, 3, which rank 0's heartbeat pipe replaces unless the launcher moves it.
void test_worker_trains(const std::string& dir) {
  const std::string cfg = dir + "/run.toml";
  write_text(cfg,
             "[run]\nname = \"port\"\nthreads = 1\n[model]\npreset = \"custom\"\nn_layer = 2\nn_head = 2\n"
             "n_embd = 32\nvocab_size = 128\nmax_seq_len = 32\n[data]\nsynthetic_tokens = 30000\n"
             "[train]\nsteps = 3\nmicro_batch = 2\nseq_len = 16\n[parallel]\ndp = 2\ntimeout_s = 60\n");
  const std::string log = dir + "/worker.log";
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);  // run_worker() leaves it open as descriptor 3, which hides the fault
    const std::vector<std::string> args = {FLOTILLA_WORKER_PATH,
                                           "launch",
                                           "--nproc-per-node",
                                           "2",
                                           "--master-port",
                                           "0",
                                           "--no-bind",
                                           "--",
                                           "train",
                                           "--config",
                                           cfg,
                                           "--out-dir",
                                           dir + "/run",
                                           "--quiet"};
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  ProcResult r;
  r.exit_code = wait_exit(pid);
  r.output = read_file(log);
  CHECK_MSG(r.exit_code == 0 && !has(r.output, "already in use"), "exit %d\n%s", r.exit_code,
            r.output.c_str());
}

}  // namespace

int main() {
  // As from a bare shell: nothing open above stderr, so the launcher's store socket would get
  // descriptor 3, the one every rank's heartbeat pipe takes (that once cost rank 0 its socket).
  for (int fd = 3; fd < 1024; ++fd) close(fd);
  const std::string dir = fresh_dir("launch_store_port");
  test_adopt();
  test_launch_holds_port(dir);
  test_worker_trains(dir);
  return summary("launch_store_port");
}
