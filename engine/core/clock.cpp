// The clock seam (see clock.h).
#include "engine/core/clock.h"

#include <time.h>

#include <chrono>
#include <cstdlib>
#include <fstream>

namespace flotilla::clk {
namespace {

double test_wall_offset() {
  static const char* file = std::getenv("FLOTILLA_TEST_WALL_OFFSET_FILE");
  if (!file || !*file) return 0;
  std::ifstream in(file);
  double offset = 0;
  if (!(in >> offset)) return 0;
  return offset;
}

}  // namespace

double wall_now() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count() + test_wall_offset();
}

double boot_now() {
  timespec ts{};
  if (::clock_gettime(CLOCK_BOOTTIME, &ts) != 0) ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

const std::string& boot_id() {
  static const std::string id = [] {
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string s;
    std::getline(in, s);
    return s;
  }();
  return id;
}

double process_wall_now() {
  using namespace std::chrono;
  static const double anchor_wall = wall_now();
  static const steady_clock::time_point anchor = steady_clock::now();
  return anchor_wall + duration<double>(steady_clock::now() - anchor).count();
}

}  // namespace flotilla::clk
