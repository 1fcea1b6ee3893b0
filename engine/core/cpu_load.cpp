// /proc/stat and getrusage accounting for LoadWindow.
#include "engine/core/cpu_load.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

namespace flotilla {
namespace {

// CPU seconds the whole machine spent busy (all processes), from /proc/stat; < 0 if unavailable.
double machine_busy_seconds() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  if (!(in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal) || cpu != "cpu")
    return -1;
  return static_cast<double>(user + nice + system + irq + softirq + steal) /
         static_cast<double>(sysconf(_SC_CLK_TCK));
}

double own_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

}  // namespace

LoadWindow::LoadWindow()
    : busy0_(machine_busy_seconds()), own0_(own_cpu_seconds()), t0_(std::chrono::steady_clock::now()) {}

double LoadWindow::other_load() const {
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  const double busy1 = machine_busy_seconds();
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (busy0_ < 0 || busy1 < 0 || cpus < 1 || wall <= 0) return 0.0;
  const double other = busy1 - busy0_ - (own_cpu_seconds() - own0_);
  return std::clamp(other / (wall * static_cast<double>(cpus)), 0.0, 1.0);
}

}  // namespace flotilla
