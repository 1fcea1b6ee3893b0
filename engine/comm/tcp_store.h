// The rendezvous key-value store: a server thread hosted by rank 0 at MASTER_ADDR:MASTER_PORT and
// a client in every rank (rank 0 included). It carries rank check-in, Gloo's pair addresses (through
// GlooStoreAdapter in gloo_process_group.cpp) and NCCL's unique id.
//
// Non-obvious decisions:
// - Blocking waits happen on the server (a WAIT request is parked until its keys exist or its own
//   deadline passes, and is always answered), so a client timeout never leaves a stale reply in
//   the stream; the client adds a grace period on top for a server that has stopped answering.
// - This header does not include Gloo: a bare GPU node without Gloo still rendezvouses for NCCL.
// - Keys are never deleted: a run's store lives and dies with rank 0's process, so every group
//   gets a fresh key prefix instead (a reused key would silently hand out stale addresses).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace flotilla::comm {

using Millis = std::chrono::milliseconds;

// Serves the store on host:port from a background thread (poll loop, any number of clients).
inline constexpr const char* kStoreFdEnv = "FLOTILLA_STORE_FD";

class TcpStoreServer {
 public:
  // Binds host:port (port 0 picks a free one). Throws Error(kComm) when the port is in use or host
  // is not an address of this machine.
  //
  // When the environment's FLOTILLA_STORE_FD names a listening TCP socket bound to `port`, it
  // serves on that socket instead: `flotilla-worker launch --master-port 0` opens it when it picks
  // the port and hands it to rank 0, so no other program can take the port between the pick and
  // rank 0's start (a Gloo pair listening on an ephemeral port once did, and ranks of two runs
  // then met the wrong peers). The variable is consumed: child processes do not see it.
  TcpStoreServer(const std::string& host, int port);
  ~TcpStoreServer();  // stops the thread and closes every connection
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const { return port_; }

 private:
  void serve();

  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  int port_ = 0;
  std::thread thread_;
};

// A client connection. Thread-safe: requests from several threads are serialised.
// Every failure throws Error(kComm) naming the store address and the key(s).
class TcpStore {
 public:
  // Connects to host:port, retrying until `timeout` (rank 0 may start later than this rank).
  // `timeout` is also the default for get() and wait().
  TcpStore(const std::string& host, int port, Millis timeout);
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::vector<char>& value);
  void set(const std::string& key, const std::string& value);
  // Waits until key exists (default timeout), then returns its value.
  std::vector<char> get(const std::string& key);
  std::vector<char> get(const std::string& key, Millis timeout);
  std::string get_string(const std::string& key, Millis timeout);
  // Atomically adds delta to the counter at key (created at 0) and returns the new value.
  int64_t add(const std::string& key, int64_t delta);
  // True if every key exists (no waiting).
  bool check(const std::vector<std::string>& keys);
  // Waits until every key exists; throws Error(kComm) naming the missing keys on timeout.
  void wait(const std::vector<std::string>& keys, Millis timeout);
  // As wait(), but returns the keys still missing at the timeout instead of throwing.
  std::vector<std::string> wait_missing(const std::vector<std::string>& keys, Millis timeout);

  Millis timeout() const { return timeout_; }
  std::string address() const { return host_ + ":" + std::to_string(port_); }

 private:
  std::string request(const std::string& frame, Millis reply_within, const std::string& what);

  std::string host_;
  int port_;
  Millis timeout_;
  std::mutex mutex_;
  int fd_ = -1;
  bool broken_ = false;
};

}  // namespace flotilla::comm
