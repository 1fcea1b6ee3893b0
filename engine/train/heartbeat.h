// Heartbeats to the launch supervisor: "step=N coll=<in-flight collective>" lines on the file
// descriptor named by FLOTILLA_HEARTBEAT_FD, once a second from a background thread and after
// every step. Writes are non-blocking: a slow supervisor never stalls training.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace flotilla {

class Heartbeat {
 public:
  Heartbeat();  // inactive unless FLOTILLA_HEARTBEAT_FD is set
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  void set_step(int64_t step);                   // also beats immediately
  void set_collective(const std::string& what);  // "" when none is in flight
  // Asked on every beat when no collective was set explicitly (e.g. the process groups' oldest
  // unfinished operation), so a rank stuck inside a collective says which one.
  void set_collective_provider(std::function<std::string()> provider);

 private:
  void beat();
  int fd_ = -1;
  std::atomic<int64_t> step_{0};
  std::mutex mu_;
  std::string collective_;
  std::function<std::string()> provider_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace flotilla
