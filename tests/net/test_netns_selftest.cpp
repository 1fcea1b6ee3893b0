// The slow-link fixture checks itself (issue 36): a raw TCP stream from node n1 to node n0 carries
// the fixture's RATE within 15% (the tbf on each node's egress is what shapes it); the same stream
// over n0's own loopback (a node's intra-node path) is far faster; `limit` changes the rate and
// "off" lifts it; and the app's `flotilla nodes add` + probe + trust works against the nodes'
// sshd (each with its own host key and HOME) exactly as against real machines.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <thread>

#include "check.h"
#include "netns_cli.h"

using namespace flotilla_test;

namespace {

constexpr int kPort = 5301;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Receiver: accepts one stream on ip:kPort and writes bytes/s (first byte to EOF) to `out_fd`.
int receive(const std::string& ip, int out_fd) {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  const int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(kPort);
  inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  if (bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(s, 1) != 0) return 2;
  timeval tv{20, 0};
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const int c = accept(s, nullptr, nullptr);
  if (c < 0) return 3;
  setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::vector<char> buf(1 << 16);
  double first = 0, last = 0;
  double bytes = 0;
  for (;;) {
    const ssize_t n = recv(c, buf.data(), buf.size(), 0);
    if (n <= 0) break;
    last = now_s();
    if (first == 0)
      first = last;
    else
      bytes += static_cast<double>(n);  // bytes after the first read, over the time since it
  }
  const double rate = last > first ? bytes / (last - first) : 0;
  if (write(out_fd, &rate, sizeof rate) != sizeof rate) return 4;
  close(c);
  close(s);
  return 0;
}

// Sender: connects to ip:kPort (retrying while the receiver starts) and streams for `seconds`.
int send_for(const std::string& ip, double seconds) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(kPort);
  inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  int s = -1;
  for (int tries = 0; tries < 100; ++tries) {
    s = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) break;
    close(s);
    s = -1;
    usleep(50000);
  }
  if (s < 0) return 2;
  std::vector<char> buf(1 << 16, 'x');
  const double end = now_s() + seconds;
  while (now_s() < end)
    if (send(s, buf.data(), buf.size(), MSG_NOSIGNAL) <= 0) return 3;
  close(s);
  return 0;
}

// Bytes/s of a stream from namespace `from` to `to_ip` (received in namespace `to`); -1 on error.
double stream(const std::string& to, const std::string& to_ip, const std::string& from, double seconds) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const pid_t r = fork_in_netns(to, [&] { return receive(to_ip, fds[1]); });
  const pid_t s = fork_in_netns(from, [&] { return send_for(to_ip, seconds); });
  const int sent = wait_exit(s);
  const int received = wait_exit(r);
  close(fds[1]);
  double rate = -1;
  if (sent != 0 || received != 0 || read(fds[0], &rate, sizeof rate) != sizeof rate) {
    std::printf("stream %s -> %s failed: sender %d, receiver %d\n", from.c_str(), to_ip.c_str(), sent,
                received);
    rate = -1;
  }
  close(fds[0]);
  return rate;
}

void check_cli(const NetnsNodes& net) {
  CliWorkspace ws(fresh_dir("netns_selftest"));
  for (size_t i = 0; i < 2; ++i) {
    const std::string why = add_trusted_netns_node(ws, net, i, i == 0 ? "a" : "b");
    CHECK_MSG(why.empty(), "%s", why.c_str());
  }
}

}  // namespace

int main() {
  const NetnsNodes net(FLOTILLA_NETNS_STATE);
  if (!net.unavailable().empty()) {
    std::printf("SKIP: %s\n", net.unavailable().c_str());
    return kNetnsSkip;
  }
  CHECK(net.nodes().size() >= 2);
  const double rate = tc_rate_bytes_per_s(net.rate());
  CHECK_MSG(rate > 0, "the fixture has no rate limit (%s): start it with a RATE", net.rate().c_str());
  if (net.nodes().size() < 2 || rate <= 0) return flotilla_test::summary("netns_selftest");
  const NetnsNode& a = net.node(0);
  const NetnsNode& b = net.node(1);

  // n1 -> n0 over the link: n1's egress tbf shapes it.
  const double link = stream(a.netns, a.ip, b.netns, 2.5);
  std::printf("link n1 -> n0: %.2f MB/s (rate %s = %.2f MB/s)\n", link / 1e6, net.rate().c_str(), rate / 1e6);
  CHECK_MSG(link > 0.85 * rate && link < 1.15 * rate, "%.0f B/s against %.0f B/s", link, rate);
  // And the other way round (n0's tbf).
  const double back = stream(b.netns, b.ip, a.netns, 1.5);
  std::printf("link n0 -> n1: %.2f MB/s\n", back / 1e6);
  CHECK_MSG(back > 0.85 * rate && back < 1.15 * rate, "%.0f B/s against %.0f B/s", back, rate);

  // n0's loopback: its intra-node path is not shaped.
  const double loop = stream(a.netns, "127.0.0.1", a.netns, 1.0);
  std::printf("loopback in n0: %.1f MB/s\n", loop / 1e6);
  CHECK_MSG(loop > 10 * rate, "loopback %.0f B/s, link rate %.0f B/s", loop, rate);

  // `limit` doubles node n1's rate, then the fixture's rate is restored.
  const double doubled = 2 * rate;
  CHECK(net.limit(1, std::to_string(static_cast<long long>(doubled * 8 / 1000)) + "kbit"));
  const double faster = stream(a.netns, a.ip, b.netns, 1.5);
  std::printf("link n1 -> n0 at twice the rate: %.2f MB/s\n", faster / 1e6);
  CHECK_MSG(faster > 0.85 * doubled && faster < 1.15 * doubled, "%.0f B/s against %.0f B/s", faster, doubled);
  CHECK(net.limit(1, net.rate()));

  check_cli(net);
  return flotilla_test::summary("netns_selftest");
}
