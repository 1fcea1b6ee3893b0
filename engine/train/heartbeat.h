// Heartbeats to the launch supervisor: "step=N coll=<in-flight collective>" lines on the file
// descriptor named by FLOTILLA_HEARTBEAT_FD, once a second from a background thread and after
// every step. Writes are non-blocking: a slow supervisor never stalls training.
//
// The same thread is the orphan watchdog: a rank whose supervisor died (its parent changed) got
// SIGTERM from launch's parent-death signal and stops at its next step; if it is still alive
// orphan_grace_s later (stuck in a collective, or a save that cannot finish), the watchdog ends
// the process, since no supervisor is left to send the SIGKILL that would otherwise come.
#pragma once

#include <sys/types.h>

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
  // Seconds an orphaned rank may take to stop (its emergency save) before the watchdog ends it.
  void set_orphan_grace(double seconds) { orphan_grace_s_.store(seconds); }

 private:
  void beat();
  void watch_parent();
  int fd_ = -1;
  pid_t parent_ = 0;                        // the supervisor (launch) at start
  std::atomic<double> orphan_grace_s_{60};  // see set_orphan_grace
  double orphaned_at_ = -1;                 // steady seconds when the parent was first seen gone
  std::atomic<int64_t> step_{0};
  std::mutex mu_;
  std::string collective_;
  std::function<std::string()> provider_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace flotilla
