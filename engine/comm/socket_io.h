// Blocking TCP helpers with deadlines, for the rendezvous store (engine/comm/tcp_store.*).
//
// Non-obvious decision: every call takes an absolute deadline and waits with poll() on a
// non-blocking socket, never with SO_RCVTIMEO, so a partial read or write, EINTR and EAGAIN all
// resume against the same deadline instead of restarting a per-call timer. Results are a status
// value, not exceptions: the store turns them into messages that name the address and the step.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace flotilla::comm {

using Clock = std::chrono::steady_clock;

struct IoStatus {
  enum Kind { kOk, kTimeout, kClosed, kError };
  Kind kind = kOk;
  int err = 0;  // errno for kError
  bool ok() const { return kind == kOk; }
  std::string describe() const;  // "timed out", "connection closed by the peer", strerror
};

// Writes all n bytes (MSG_NOSIGNAL: a dead peer is an error, not SIGPIPE).
IoStatus send_all(int fd, const void* data, size_t n, Clock::time_point deadline);
// Reads exactly n bytes; kClosed when the peer closes first.
IoStatus recv_all(int fd, void* data, size_t n, Clock::time_point deadline);

// One connection attempt to host:port over every resolved address, each bounded by the deadline.
// Returns a connected non-blocking socket with TCP_NODELAY, or -1 with *error set.
int connect_tcp(const std::string& host, int port, Clock::time_point deadline, std::string* error);

// A listening non-blocking socket on host:port (port 0 picks one; *bound_port receives it).
// Returns -1 with *error set ("address in use", "not an address of this machine", ...).
int listen_tcp(const std::string& host, int port, int* bound_port, std::string* error);

// The local IP address this machine uses to reach host (a UDP connect, no packet is sent);
// "127.0.0.1" for loopback names. Empty when host cannot be resolved.
std::string local_address_toward(const std::string& host);

// A TCP port on host that was free a moment ago (bind port 0, read it, close). Racy by nature:
// for tests and for launchers that pick MASTER_PORT.
int find_free_port(const std::string& host = "127.0.0.1");

// Milliseconds left until deadline, clamped to [0, INT_MAX] for poll().
int ms_until(Clock::time_point deadline);

}  // namespace flotilla::comm
