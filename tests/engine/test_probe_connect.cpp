// `flotilla-worker probe --connect`: timed TCP connects against a socket this test listens on (all
// answered, small RTT, min <= median), a bound port nobody listens on (refused, fast), a listener
// whose accept queue is full (timed out within the timeout, not a hang), strict target validation
// (hostile hosts, bad ports: Error naming the option, a canary never created), and the JSON and
// text output of the real worker.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "check.h"
#include "engine/core/error.h"
#include "engine/core/probe.h"
#include "worker_run.h"

using namespace flotilla;
using namespace flotilla_test;

namespace {

// A TCP socket bound to 127.0.0.1 on a free port; listening with `backlog` unless backlog < 0.
struct Socket {
  int fd = -1;
  int port = 0;
  explicit Socket(int backlog) {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    if (backlog >= 0) CHECK(::listen(fd, backlog) == 0);
  }
  ~Socket() { ::close(fd); }
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void test_parse() {
  const auto t = parse_connect_targets("127.0.0.1:22,[::1]:2222,gpu-1.lab.example:65535,node7:1");
  CHECK(t.size() == 4);
  if (t.size() == 4) {
    CHECK(t[0].host == "127.0.0.1" && t[0].port == 22);
    CHECK(t[1].host == "[::1]" && t[1].port == 2222);
    CHECK(t[1].text() == "[::1]:2222");
    CHECK(t[2].host == "gpu-1.lab.example" && t[2].port == 65535);
    CHECK(t[3].host == "node7" && t[3].port == 1);
  }
  const std::vector<std::string> bad = {
      "",          "host",          "host:",       ":22",           "host:0",        "host:65536",
      "host:022",  "host:22x",      "host: 22",    "::1:22",        "[::1:22",       "[nothost]:22",
      "a,,b:1",    "a:1,",          "0127.0.0.1:22", "300.1.1.1:22", "-oProxyCommand=x:22",
      "a;touch /tmp/x:22", "$(touch x):22", "`touch x`:22", "a b:22", "a\nb:22", "a'b:22",
      "a..b:22",   "-a.b:22",       "a-.b:22",     std::string(254, 'a') + ":22"};
  for (const auto& b : bad) {
    bool refused = false;
    try {
      parse_connect_targets(b, "--connect");
    } catch (const Error& e) {
      refused = e.code() == ExitCode::kUsage && std::string(e.what()).find("--connect") != std::string::npos;
    }
    CHECK_MSG(refused, "accepted or wrong error: '%s'", b.c_str());
  }
  CHECK(connect_host_problem("10.0.0.5").empty());
  CHECK(connect_host_problem("[fd00::5]").empty());
  CHECK(connect_host_problem("a;b").find("';'") != std::string::npos);
}

void test_listening_and_closed() {
  Socket listening(64);
  const auto t0 = std::chrono::steady_clock::now();
  const ConnectProbe ok = probe_connect({"127.0.0.1", listening.port}, 5);
  CHECK(ok.error.empty());
  CHECK(ok.attempts == 5 && ok.answered == 5);
  CHECK(ok.min_ms > 0 && ok.min_ms <= ok.median_ms);
  CHECK_MSG(ok.median_ms < 50, "loopback median %.3f ms", ok.median_ms);
  CHECK(seconds_since(t0) < 1.0);
  std::printf("loopback connect: min %.3f ms, median %.3f ms\n", ok.min_ms, ok.median_ms);

  Socket bound(-1);  // bound, not listening: the kernel answers RST
  const auto t1 = std::chrono::steady_clock::now();
  const ConnectProbe refused = probe_connect({"127.0.0.1", bound.port}, 5);
  CHECK(refused.error == "refused");
  CHECK(refused.answered == 0 && refused.min_ms < 0 && refused.median_ms < 0);
  CHECK(seconds_since(t1) < 1.0);

  // Accept queue full: further SYNs are dropped, so the connect can only time out.
  Socket full(0);
  std::vector<int> fillers;
  for (int i = 0; i < 4; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(full.port));
    ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    fillers.push_back(fd);
  }
  usleep(100 * 1000);
  const auto t2 = std::chrono::steady_clock::now();
  const ConnectProbe slow = probe_connect({"127.0.0.1", full.port}, 2, 0.3);
  const double took = seconds_since(t2);
  CHECK_MSG(slow.error == "timed out", "error '%s'", slow.error.c_str());
  CHECK_MSG(took >= 0.55 && took < 2.0, "two 0.3 s attempts took %.2f s", took);
  for (int fd : fillers) ::close(fd);

  const ConnectProbe v6 = probe_connect({"[::1]", bound.port}, 1);
  CHECK(!v6.error.empty());  // refused, or unreachable where IPv6 is off: never a success
}

void test_worker_cli() {
  Socket listening(64);
  Socket bound(-1);
  const std::string targets =
      "127.0.0.1:" + std::to_string(listening.port) + ",127.0.0.1:" + std::to_string(bound.port);
  ProcResult r = run_worker({"probe", "--json", "--connect", targets, "--connect-count", "3"});
  CHECK_MSG(r.exit_code == 0, "%s", r.output.c_str());
  const auto doc = nlohmann::json::parse(r.output, nullptr, false);
  CHECK(doc.is_object() && doc.contains("connect") && doc["connect"].size() == 2);
  if (doc.is_object() && doc.contains("connect") && doc["connect"].size() == 2) {
    const auto& a = doc["connect"][0];
    const auto& b = doc["connect"][1];
    CHECK(a["target"] == "127.0.0.1:" + std::to_string(listening.port));
    CHECK(a["attempts"] == 3 && a["answered"] == 3 && a["error"].is_null());
    CHECK(a["median_ms"].is_number() && a["median_ms"].get<double>() > 0);
    CHECK(a["min_ms"].get<double>() <= a["median_ms"].get<double>());
    CHECK(b["error"] == "refused" && b["median_ms"].is_null() && b["answered"] == 0);
  }
  // Without --connect the document has no "connect" key (docs/probe-schema.json stays exact).
  r = run_worker({"probe", "--json"});
  CHECK(r.exit_code == 0 && nlohmann::json::parse(r.output, nullptr, false).count("connect") == 0);

  r = run_worker({"probe", "--connect", targets});
  CHECK(r.exit_code == 0);
  CHECK(r.output.find("Connect   127.0.0.1:" + std::to_string(listening.port) + "  min ") != std::string::npos);
  CHECK(r.output.find("Connect   127.0.0.1:" + std::to_string(bound.port) + "  refused") != std::string::npos);

  const std::string canary = fresh_dir("probe_connect_canary") + "/canary";
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"probe", "--connect", "a;touch " + canary + ":22"},
           {"probe", "--connect", "$(touch " + canary + "):22"},
           {"probe", "--connect=-oProxyCommand=touch " + canary + ":22"},
           {"probe", "--connect", "127.0.0.1:99999"},
           {"probe", "--connect", "127.0.0.1:22", "--connect-count", "0"},
           {"probe", "--connect", "127.0.0.1:22", "--connect-count", "101"},
           {"probe", "--connect-count", "3"}}) {
    r = run_worker(args);
    CHECK_MSG(r.exit_code == 2, "exit %d for %s: %s", r.exit_code, args[2].c_str(), r.output.c_str());
    CHECK(r.output.find("--connect") != std::string::npos);
  }
  CHECK(!std::filesystem::exists(canary));
}

}  // namespace

int main() {
  test_parse();
  test_listening_and_closed();
  test_worker_cli();
  return summary("probe_connect");
}
