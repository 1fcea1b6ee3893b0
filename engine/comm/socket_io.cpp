// Blocking-with-deadline TCP helpers: poll() + non-blocking sockets; see socket_io.h.
#include "engine/comm/socket_io.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#include "engine/core/error.h"

namespace flotilla::comm {
namespace {

bool set_nonblocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  return flags >= 0 && fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

// Waits until fd is ready for `events` or the deadline passes; retries EINTR.
IoStatus wait_ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = poll(&p, 1, ms_until(deadline));
    if (rc > 0) {
      // POLLERR/POLLHUP: let the next send/recv report the precise error.
      return {};
    }
    if (rc == 0) return {IoStatus::kTimeout, 0};
    if (errno == EINTR) continue;
    return {IoStatus::kError, errno};
  }
}

struct AddrInfoList {
  addrinfo* head = nullptr;
  ~AddrInfoList() {
    if (head) freeaddrinfo(head);
  }
};

int resolve(const std::string& host, int port, int socktype, bool passive, AddrInfoList* out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = socktype;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  const std::string service = std::to_string(port);
  return getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &out->head);
}

}  // namespace

std::string IoStatus::describe() const {
  switch (kind) {
    case kOk:
      return "ok";
    case kTimeout:
      return "timed out";
    case kClosed:
      return "connection closed by the peer";
    case kError:
      return errno_string(err);
  }
  return "unknown";
}

int ms_until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return left > INT_MAX ? INT_MAX : static_cast<int>(left);
}

IoStatus send_all(int fd, const void* data, size_t n, Clock::time_point deadline) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t rc = ::send(fd, p, n, MSG_NOSIGNAL);
    if (rc > 0) {
      p += rc;
      n -= static_cast<size_t>(rc);
      continue;
    }
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (Clock::now() >= deadline) return {IoStatus::kTimeout, 0};
      const IoStatus w = wait_ready(fd, POLLOUT, deadline);
      if (!w.ok()) return w;
      continue;
    }
    if (rc < 0 && (errno == EPIPE || errno == ECONNRESET)) return {IoStatus::kClosed, errno};
    return {IoStatus::kError, rc < 0 ? errno : EIO};
  }
  return {};
}

IoStatus recv_all(int fd, void* data, size_t n, Clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t rc = ::recv(fd, p, n, 0);
    if (rc > 0) {
      p += rc;
      n -= static_cast<size_t>(rc);
      continue;
    }
    if (rc == 0) return {IoStatus::kClosed, 0};
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (Clock::now() >= deadline) return {IoStatus::kTimeout, 0};
      const IoStatus w = wait_ready(fd, POLLIN, deadline);
      if (!w.ok()) return w;
      continue;
    }
    if (errno == ECONNRESET) return {IoStatus::kClosed, errno};
    return {IoStatus::kError, errno};
  }
  return {};
}

int connect_tcp(const std::string& host, int port, Clock::time_point deadline, std::string* error) {
  AddrInfoList list;
  const int gai = resolve(host, port, SOCK_STREAM, false, &list);
  if (gai != 0) {
    *error = std::string("cannot resolve '") + host + "': " + gai_strerror(gai);
    return -1;
  }
  *error = "no address";
  for (addrinfo* ai = list.head; ai != nullptr; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      *error = errno_string(errno);
      continue;
    }
    set_nonblocking(fd);
    int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && (errno == EINPROGRESS || errno == EINTR)) {
      const IoStatus w = wait_ready(fd, POLLOUT, deadline);
      int so_error = 0;
      socklen_t len = sizeof(so_error);
      if (w.ok() && getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) == 0 && so_error == 0) {
        rc = 0;
      } else {
        errno = w.ok() ? so_error : (w.kind == IoStatus::kTimeout ? ETIMEDOUT : w.err);
      }
    }
    if (rc == 0) {
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return fd;
    }
    *error = errno_string(errno);
    ::close(fd);
  }
  return -1;
}

int listen_tcp(const std::string& host, int port, int* bound_port, std::string* error) {
  AddrInfoList list;
  const int gai = resolve(host, port, SOCK_STREAM, true, &list);
  if (gai != 0) {
    *error = std::string("cannot resolve '") + host + "': " + gai_strerror(gai);
    return -1;
  }
  *error = "no address";
  for (addrinfo* ai = list.head; ai != nullptr; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      *error = errno_string(errno);
      continue;
    }
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, 512) != 0) {
      const int e = errno;
      if (e == EADDRINUSE) {
        *error = "port " + std::to_string(port) + " is already in use (another run, or a stale process?)";
      } else if (e == EADDRNOTAVAIL) {
        *error = "'" + host + "' is not an address of this machine";
      } else {
        *error = errno_string(e);
      }
      ::close(fd);
      continue;
    }
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    *bound_port = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                             : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    set_nonblocking(fd);
    return fd;
  }
  return -1;
}

std::string local_address_toward(const std::string& host) {
  AddrInfoList list;
  if (resolve(host, 9, SOCK_DGRAM, false, &list) != 0) return {};
  for (addrinfo* ai = list.head; ai != nullptr; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    std::string result;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
      sockaddr_storage addr{};
      socklen_t len = sizeof(addr);
      char text[INET6_ADDRSTRLEN] = {};
      if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
        const void* src = addr.ss_family == AF_INET6
                              ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr)
                              : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&addr)->sin_addr);
        if (inet_ntop(addr.ss_family, src, text, sizeof(text)) != nullptr) result = text;
      }
    }
    ::close(fd);
    if (!result.empty()) return result;
  }
  return {};
}

int find_free_port(const std::string& host) {
  std::string error;
  int port = 0;
  const int fd = listen_tcp(host, 0, &port, &error);
  if (fd < 0) throw Error(ExitCode::kComm, "cannot find a free TCP port on " + host + ": " + error);
  ::close(fd);
  return port;
}

}  // namespace flotilla::comm
