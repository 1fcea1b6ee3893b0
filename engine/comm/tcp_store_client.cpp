// The rendezvous store client: connect-with-retry, HELLO handshake, one request at a time.
//
// Non-obvious decision: any I/O failure marks the connection broken for good. A half-read reply
// would desynchronise the stream, and a rank that lost its store has lost the run anyway; the
// message says so instead of retrying into undefined state.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "engine/comm/socket_io.h"
#include "engine/comm/tcp_store.h"
#include "engine/comm/tcp_store_wire.h"
#include "engine/core/error.h"

namespace flotilla::comm {
namespace {

// Extra time a client gives the server beyond a WAIT's own timeout before calling it dead.
constexpr Millis kReplyGrace{10000};
// A plain request (set/get/add/check) must be answered within this (or the store timeout if longer).
constexpr Millis kPlainReply{30000};

std::string seconds_text(Millis ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g s", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

std::string join_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i > 0) out += ", ";
    out += keys[i];
  }
  return out;
}

}  // namespace

TcpStore::TcpStore(const std::string& host, int port, Millis timeout)
    : host_(host), port_(port), timeout_(timeout) {
  const auto deadline = Clock::now() + timeout;
  std::string last_error;
  Millis pause{20};
  for (;;) {
    fd_ = connect_tcp(host, port, deadline, &last_error);
    if (fd_ >= 0) {
      wire::Writer hello(wire::kHello);
      hello.str(std::string(wire::kMagic));
      hello.u32(wire::kVersion);
      const std::string& frame = hello.frame();
      // A short handshake deadline: a listener that never answers is not our store.
      const auto hs_deadline = std::min(deadline, Clock::now() + Millis(5000));
      IoStatus st = send_all(fd_, frame.data(), frame.size(), hs_deadline);
      char head[5];
      if (st.ok()) st = recv_all(fd_, head, sizeof(head), hs_deadline);
      if (st.ok() && wire::read_u32_le(head) == 1 && head[4] == wire::kOk) return;
      ::close(fd_);
      fd_ = -1;
      if (st.ok() || st.kind == IoStatus::kClosed) {
        throw Error(ExitCode::kComm, "rendezvous: " + address() +
                                         " answers but is not a Flotilla rendezvous store (another "
                                         "program or run uses MASTER_PORT " +
                                         std::to_string(port) + "?): choose another MASTER_PORT");
      }
      last_error = "handshake " + st.describe();
    }
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::min(pause, std::chrono::duration_cast<Millis>(deadline - Clock::now())));
    pause = std::min(pause * 2, Millis(500));
  }
  throw Error(ExitCode::kComm,
              "rendezvous: could not reach the store of rank 0 at " + address() + " for " +
                  seconds_text(timeout) + " (" + last_error +
                  "): is rank 0 running, and are MASTER_ADDR/MASTER_PORT the same on every rank?");
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
}

std::string TcpStore::request(const std::string& frame, Millis reply_within, const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (broken_) {
    throw Error(ExitCode::kComm, "rendezvous store " + address() + ": " + what +
                                     ": the connection failed earlier (rank 0 gone?)");
  }
  const auto deadline = Clock::now() + reply_within;
  IoStatus st = send_all(fd_, frame.data(), frame.size(), deadline);
  char head[4];
  std::string body;
  if (st.ok()) st = recv_all(fd_, head, sizeof(head), deadline);
  if (st.ok()) {
    const uint32_t len = wire::read_u32_le(head);
    if (len == 0 || len > wire::kMaxFrame) {
      st = {IoStatus::kError, EPROTO};
    } else {
      body.resize(len);
      st = recv_all(fd_, body.data(), len, deadline);
    }
  }
  if (!st.ok()) {
    broken_ = true;
    const std::string why = st.kind == IoStatus::kTimeout ? "no reply within " + seconds_text(reply_within) +
                                                                " (rank 0 stopped or overloaded?)"
                                                          : st.describe() + " (rank 0 exited or crashed?)";
    throw Error(ExitCode::kComm, "rendezvous store " + address() + ": " + what + ": " + why);
  }
  return body;
}

void TcpStore::set(const std::string& key, const std::vector<char>& value) {
  wire::Writer w(wire::kSet);
  w.str(key);
  w.str(value);
  request(w.frame(), std::max(timeout_, kPlainReply), "set '" + key + "'");
}

void TcpStore::set(const std::string& key, const std::string& value) {
  set(key, std::vector<char>(value.begin(), value.end()));
}

std::vector<char> TcpStore::get(const std::string& key) { return get(key, timeout_); }

std::vector<char> TcpStore::get(const std::string& key, Millis timeout) {
  wait({key}, timeout);
  wire::Writer w(wire::kGet);
  w.str(key);
  const std::string body = request(w.frame(), std::max(timeout_, kPlainReply), "get '" + key + "'");
  if (body.empty() || body[0] != wire::kOk) {
    throw Error(ExitCode::kComm, "rendezvous store " + address() + ": key '" + key + "' vanished");
  }
  wire::Reader r(body.data() + 1, body.size() - 1);
  const std::string value = r.str();
  return std::vector<char>(value.begin(), value.end());
}

std::string TcpStore::get_string(const std::string& key, Millis timeout) {
  const std::vector<char> v = get(key, timeout);
  return std::string(v.begin(), v.end());
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  wire::Writer w(wire::kAdd);
  w.str(key);
  w.i64(delta);
  const std::string body = request(w.frame(), std::max(timeout_, kPlainReply), "add '" + key + "'");
  if (body.empty() || body[0] != wire::kOk) {
    throw Error(ExitCode::kComm, "rendezvous store " + address() + ": add '" + key +
                                     "' refused (the key holds a value that is not a counter)");
  }
  wire::Reader r(body.data() + 1, body.size() - 1);
  return r.i64();
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  wire::Writer w(wire::kCheck);
  w.u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
  const std::string body = request(w.frame(), std::max(timeout_, kPlainReply), "check " + join_keys(keys));
  return !body.empty() && body[0] == wire::kOk;
}

std::vector<std::string> TcpStore::wait_missing(const std::vector<std::string>& keys, Millis timeout) {
  wire::Writer w(wire::kWait);
  w.u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
  w.i64(timeout.count());
  const std::string body = request(w.frame(), timeout + kReplyGrace, "wait for " + join_keys(keys));
  if (!body.empty() && body[0] == wire::kOk) return {};
  std::vector<std::string> missing;
  if (!body.empty() && body[0] == wire::kTimedOut) {
    wire::Reader r(body.data() + 1, body.size() - 1);
    const uint32_t n = r.u32();
    for (uint32_t i = 0; i < n; ++i) missing.push_back(r.str());
  }
  if (missing.empty()) missing = keys;  // a malformed reply: report everything as missing
  return missing;
}

void TcpStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  const std::vector<std::string> missing = wait_missing(keys, timeout);
  if (!missing.empty()) {
    throw Error(ExitCode::kComm, "rendezvous store " + address() + ": waited " + seconds_text(timeout) +
                                     " for " + join_keys(missing) +
                                     " (the rank that sets it has not arrived, "
                                     "stopped or crashed)");
  }
}

}  // namespace flotilla::comm
