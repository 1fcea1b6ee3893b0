// What memory this process can really use: the smallest of the host's MemAvailable, the memory
// limit of its cgroup (v1 or v2, every ancestor's too) and its address-space limit (RLIMIT_AS,
// `ulimit -v`). The planner compares a run's memory with this, not with the machine's total RAM
// (issue 19: a run "fitting" 23.5 GiB of RAM was OOM-killed in a 2 GiB cgroup).
//
// Decision: a cgroup's headroom is its limit minus what it holds now, not counting inactive file
// cache (the kernel reclaims that before it OOM-kills); RLIMIT_AS headroom is the limit minus the
// address space already mapped but not resident (reserved thread stacks, allocator arenas), since
// the plan's runtime term already counts the resident baseline.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace flotilla {

struct MemoryLimitSource {
  std::string name;     // "MemAvailable", "cgroup v2 memory.max (/sys/fs/cgroup/x)", "RLIMIT_AS (ulimit -v)"
  uint64_t limit = 0;   // the configured limit (MemTotal for the host)
  uint64_t usable = 0;  // what is left of it for this process
};

struct MemoryLimit {
  uint64_t usable = 0;  // min over sources; 0 when nothing could be read
  std::string binding;  // name of the source that gives `usable`
  std::vector<MemoryLimitSource> sources;
  // "1.50 GiB usable (RLIMIT_AS (ulimit -v): limit 2.00 GiB; MemAvailable 21.3 GiB)".
  std::string describe() const;
};

// Reads /proc/meminfo, /proc/self/cgroup with the cgroup mounts under `cgroup_root`, /proc/self/status
// and getrlimit(RLIMIT_AS). `cgroup_root` is a parameter so tests can point it at a prepared tree.
MemoryLimit usable_memory(const std::string& cgroup_root = "/sys/fs/cgroup");

}  // namespace flotilla
