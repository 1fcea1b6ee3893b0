// Other processes' CPU use over a time window: how much of the machine a measurement did not get.
//
// Decision: load is (all CPUs' busy time from /proc/stat - this process's own CPU time) / (wall
// time x CPUs), so this process's threads never count as load however many it runs.
#pragma once

#include <chrono>

namespace flotilla {

class LoadWindow {
 public:
  LoadWindow();  // starts the window
  // Other processes' share of all CPUs since the start, 0..1 (0 when /proc/stat is unreadable).
  double other_load() const;

 private:
  double busy0_ = 0, own0_ = 0;
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace flotilla
