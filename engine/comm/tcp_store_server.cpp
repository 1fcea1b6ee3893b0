// The rendezvous store server: one thread, one poll() loop over the listening socket, a wake pipe
// and every client connection.
//
// Non-obvious decision: the server never blocks on a client. Replies go to a per-connection output
// buffer flushed when the socket is writable, and a malformed or oversized frame drops only that
// client, so a port scanner or a crashed rank cannot stall the other ranks' rendezvous.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <list>
#include <map>
#include <string>
#include <vector>

#include "engine/comm/socket_io.h"
#include "engine/comm/tcp_store.h"
#include "engine/comm/tcp_store_wire.h"
#include "engine/core/error.h"

namespace flotilla::comm {
namespace {

struct Conn {
  uint64_t id = 0;
  int fd = -1;
  bool greeted = false;  // sent a valid HELLO
  bool dead = false;
  std::string in;
  std::string out;
};

struct Waiter {
  uint64_t conn_id;
  std::vector<std::string> keys;
  Clock::time_point deadline;
};

class StoreState {
 public:
  // Handles one request frame body; returns false if the client must be dropped.
  bool handle(Conn& c, const char* body, size_t n) {
    try {
      wire::Reader r(body, n);
      const uint8_t op = r.u8();
      if (!c.greeted) {
        if (op != wire::kHello || r.str() != wire::kMagic || r.u32() != wire::kVersion) return false;
        c.greeted = true;
        reply(c, wire::Writer(wire::kOk));
        return true;
      }
      switch (op) {
        case wire::kSet: {
          std::string key = r.str();
          data_[key] = r.str();
          reply(c, wire::Writer(wire::kOk));
          return true;
        }
        case wire::kGet: {
          const auto it = data_.find(r.str());
          if (it == data_.end()) {
            reply(c, wire::Writer(wire::kNotFound));
          } else {
            wire::Writer w(wire::kOk);
            w.str(it->second);
            reply(c, w);
          }
          return true;
        }
        case wire::kAdd: {
          std::string key = r.str();
          const int64_t delta = r.i64();
          int64_t value = 0;
          const auto it = data_.find(key);
          if (it != data_.end()) {
            char* end = nullptr;
            errno = 0;
            value = std::strtoll(it->second.c_str(), &end, 10);
            if (errno != 0 || end == it->second.c_str() || *end != '\0') {
              reply(c, wire::Writer(wire::kBadRequest));  // the key holds something else
              return true;
            }
          }
          value += delta;
          data_[key] = std::to_string(value);
          wire::Writer w(wire::kOk);
          w.i64(value);
          reply(c, w);
          return true;
        }
        case wire::kCheck:
        case wire::kWait: {
          const uint32_t count = r.u32();
          if (count > (1u << 20)) return false;
          Waiter waiter{c.id, {}, {}};
          for (uint32_t i = 0; i < count; ++i) waiter.keys.push_back(r.str());
          if (op == wire::kCheck) {
            reply(c, wire::Writer(missing(waiter.keys).empty() ? wire::kOk : wire::kNotFound));
            return true;
          }
          const int64_t timeout_ms = r.i64();
          waiter.deadline = Clock::now() + std::chrono::milliseconds(std::max<int64_t>(0, timeout_ms));
          if (missing(waiter.keys).empty()) {
            reply(c, wire::Writer(wire::kOk));
          } else {
            waiters_.push_back(std::move(waiter));
          }
          return true;
        }
        default:
          return false;
      }
    } catch (const std::exception&) {
      return false;  // short frame or a non-numeric counter: a protocol error by this client
    }
  }

  // Answers parked waits whose keys now exist, or whose deadline has passed.
  void settle(std::map<uint64_t, Conn>& conns) {
    const auto now = Clock::now();
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      const auto conn = conns.find(it->conn_id);
      if (conn == conns.end() || conn->second.dead) {
        it = waiters_.erase(it);
        continue;
      }
      const std::vector<std::string> left = missing(it->keys);
      if (left.empty()) {
        reply(conn->second, wire::Writer(wire::kOk));
      } else if (now >= it->deadline) {
        wire::Writer w(wire::kTimedOut);
        w.u32(static_cast<uint32_t>(left.size()));
        for (const auto& k : left) w.str(k);
        reply(conn->second, w);
      } else {
        ++it;
        continue;
      }
      it = waiters_.erase(it);
    }
  }

  // Milliseconds until the nearest parked deadline (-1: none).
  int next_timeout_ms() const {
    int best = -1;
    for (const auto& w : waiters_) {
      const int ms = ms_until(w.deadline) + 1;
      if (best < 0 || ms < best) best = ms;
    }
    return best;
  }

 private:
  std::vector<std::string> missing(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    for (const auto& k : keys)
      if (data_.find(k) == data_.end()) out.push_back(k);
    return out;
  }

  static void reply(Conn& c, wire::Writer w) {
    const std::string& frame = w.frame();
    // Try to write at once; what does not fit waits for POLLOUT.
    if (c.out.empty()) {
      size_t done = 0;
      while (done < frame.size()) {
        const ssize_t rc =
            ::send(c.fd, frame.data() + done, frame.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (rc > 0) {
          done += static_cast<size_t>(rc);
        } else if (rc < 0 && errno == EINTR) {
          continue;
        } else if (rc < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
          break;
        } else {
          c.dead = true;
          return;
        }
      }
      c.out.append(frame, done, std::string::npos);
    } else {
      c.out += frame;
    }
  }

  std::map<std::string, std::string> data_;
  std::list<Waiter> waiters_;
};

// Reads what is available; handles complete frames. Returns false when the client must go.
bool read_client(Conn& c, StoreState& state) {
  char buf[65536];
  for (;;) {
    const ssize_t rc = ::recv(c.fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (rc > 0) {
      c.in.append(buf, static_cast<size_t>(rc));
      continue;
    }
    if (rc == 0) return false;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    return false;
  }
  size_t pos = 0;
  while (c.in.size() - pos >= 4) {
    const uint32_t len = wire::read_u32_le(c.in.data() + pos);
    if (len == 0 || len > wire::kMaxFrame) return false;
    if (c.in.size() - pos - 4 < len) break;
    if (!state.handle(c, c.in.data() + pos + 4, len)) return false;
    pos += 4 + len;
  }
  c.in.erase(0, pos);
  return !c.dead;
}

bool flush_client(Conn& c) {
  while (!c.out.empty()) {
    const ssize_t rc = ::send(c.fd, c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (rc > 0) {
      c.out.erase(0, static_cast<size_t>(rc));
    } else if (rc < 0 && errno == EINTR) {
      continue;
    } else if (rc < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return true;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

namespace {

// The listening socket the launcher handed over (kStoreFdEnv), when it is one and is bound to
// `port`; -1 otherwise (then the server binds as usual). Anything else under that number is left
// alone: it is not ours to close.
int inherited_listener(int port) {
  const char* text = std::getenv(kStoreFdEnv);
  if (text == nullptr) return -1;
  const int fd = std::atoi(text);
  unsetenv(kStoreFdEnv);
  if (fd <= 2 || port == 0) return -1;
  int listening = 0;
  socklen_t len = sizeof(listening);
  if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || listening == 0) return -1;
  sockaddr_storage addr{};
  socklen_t alen = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen) != 0) return -1;
  const int bound = addr.ss_family == AF_INET6  ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                    : addr.ss_family == AF_INET ? ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port)
                                                : -1;
  if (bound != port) return -1;
  fcntl(fd, F_SETFD, FD_CLOEXEC);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  return fd;
}

}  // namespace

TcpStoreServer::TcpStoreServer(const std::string& host, int port) {
  std::string error;
  listen_fd_ = inherited_listener(port);
  if (listen_fd_ >= 0)
    port_ = port;
  else
    listen_fd_ = listen_tcp(host, port, &port_, &error);
  if (listen_fd_ < 0) {
    throw Error(ExitCode::kComm, "rendezvous: rank 0 cannot host the store at " + host + ":" +
                                     std::to_string(port) + ": " + error +
                                     " (choose another MASTER_PORT, or set MASTER_ADDR to this machine)");
  }
  if (pipe2(wake_pipe_, O_CLOEXEC) != 0) {
    const int e = errno;
    ::close(listen_fd_);
    throw Error(ExitCode::kComm, "rendezvous: pipe: " + errno_string(e));
  }
  thread_ = std::thread([this] { serve(); });
}

TcpStoreServer::~TcpStoreServer() {
  const char byte = 1;
  while (::write(wake_pipe_[1], &byte, 1) < 0 && errno == EINTR) {
  }
  if (thread_.joinable()) thread_.join();
  ::close(wake_pipe_[0]);
  ::close(wake_pipe_[1]);
  ::close(listen_fd_);
}

void TcpStoreServer::serve() {
  StoreState state;
  std::map<uint64_t, Conn> conns;
  uint64_t next_id = 1;
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  for (;;) {
    fds.clear();
    ids.clear();
    fds.push_back({wake_pipe_[0], POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (auto& [id, c] : conns) {
      fds.push_back({c.fd, static_cast<short>(POLLIN | (c.out.empty() ? 0 : POLLOUT)), 0});
      ids.push_back(id);
    }
    const int rc = poll(fds.data(), fds.size(), state.next_timeout_ms());
    if (rc < 0 && errno != EINTR) break;
    if (rc > 0 && fds[0].revents != 0) break;  // shutdown requested
    if (rc > 0 && (fds[1].revents & POLLIN)) {
      for (;;) {
        const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;  // EAGAIN (drained), or a transient error such as EMFILE
        Conn c;
        c.id = next_id++;
        c.fd = fd;
        conns.emplace(c.id, std::move(c));
      }
    }
    for (size_t i = 2; rc > 0 && i < fds.size(); ++i) {
      Conn& c = conns.at(ids[i - 2]);
      const short ev = fds[i].revents;
      if ((ev & (POLLIN | POLLHUP | POLLERR)) && !read_client(c, state)) c.dead = true;
      if (!c.dead && (ev & POLLOUT) && !flush_client(c)) c.dead = true;
    }
    state.settle(conns);
    for (auto it = conns.begin(); it != conns.end();) {
      if (it->second.dead) {
        ::close(it->second.fd);
        it = conns.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& [id, c] : conns) ::close(c.fd);
}

}  // namespace flotilla::comm
