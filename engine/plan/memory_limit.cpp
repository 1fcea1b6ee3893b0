// Reading the memory limits that apply to this process (see memory_limit.h).
#include "engine/plan/memory_limit.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace flotilla {
namespace {

// cgroup v1 writes "no limit" as a page-rounded 2^63-1; anything this large is unlimited.
constexpr uint64_t kUnlimitedFloor = uint64_t{1} << 60;

bool read_text(const std::string& path, std::string* out) {
  std::ifstream f(path);
  if (!f) return false;
  std::ostringstream s;
  s << f.rdbuf();
  *out = s.str();
  return true;
}

bool read_u64(const std::string& path, uint64_t* out) {
  std::string t;
  if (!read_text(path, &t)) return false;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(t.c_str(), &end, 10);
  if (end == t.c_str()) return false;  // "max" (cgroup v2 unlimited) or garbage
  *out = v;
  return true;
}

// Value of "key value" in a memory.stat-style file, 0 when absent.
uint64_t stat_field(const std::string& path, const std::string& key) {
  std::ifstream f(path);
  std::string k;
  uint64_t v = 0;
  while (f >> k >> v)
    if (k == key) return v;
  return 0;
}

// "Key:   123 kB" from /proc/meminfo or /proc/self/status, in bytes (0 when absent).
uint64_t kb_field(const std::string& path, const std::string& key) {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key + ":", 0) == 0)
      return std::strtoull(line.c_str() + key.size() + 1, nullptr, 10) * 1024;
  return 0;
}

uint64_t minus(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

// The tightest limit among `dir` and its ancestors up to `mount` (inclusive); a dir that does not
// exist (a cgroup namespace hides the path) is skipped, so the mount's own files still count.
void cgroup_limits(const std::string& mount, std::string rel, bool v2, std::vector<MemoryLimitSource>* out) {
  const std::string limit_file = v2 ? "memory.max" : "memory.limit_in_bytes";
  const std::string usage_file = v2 ? "memory.current" : "memory.usage_in_bytes";
  const std::string inactive_key = v2 ? "inactive_file" : "total_inactive_file";
  bool found = false;
  MemoryLimitSource best;
  while (true) {
    const std::string dir = mount + (rel == "/" ? "" : rel);
    uint64_t limit = 0, usage = 0;
    if (read_u64(dir + "/" + limit_file, &limit) && limit < kUnlimitedFloor) {
      read_u64(dir + "/" + usage_file, &usage);
      const uint64_t held = minus(usage, stat_field(dir + "/memory.stat", inactive_key));
      const uint64_t usable = minus(limit, held);
      if (!found || usable < best.usable) {
        best = {std::string(v2 ? "cgroup v2 memory.max (" : "cgroup v1 memory.limit_in_bytes (") + dir + ")",
                limit, usable};
        found = true;
      }
    }
    if (rel.empty() || rel == "/") break;
    const auto slash = rel.find_last_of('/');
    rel = slash == 0 || slash == std::string::npos ? "/" : rel.substr(0, slash);
  }
  if (found) out->push_back(best);
}

std::string gib(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1ull << 30));
  return buf;
}

}  // namespace

std::string MemoryLimit::describe() const {
  std::string s = gib(usable) + " usable (" + binding;
  for (const MemoryLimitSource& src : sources) {
    if (src.name == binding) {
      s += src.name == "MemAvailable" ? "" : ": limit " + gib(src.limit);
      break;
    }
  }
  for (const MemoryLimitSource& src : sources)
    if (src.name != binding) s += "; " + src.name + " " + gib(src.usable);
  return s + ")";
}

MemoryLimit usable_memory(const std::string& cgroup_root) {
  MemoryLimit m;
  if (const uint64_t avail = kb_field("/proc/meminfo", "MemAvailable"); avail > 0)
    m.sources.push_back({"MemAvailable", kb_field("/proc/meminfo", "MemTotal"), avail});

  std::ifstream cg("/proc/self/cgroup");
  std::string line;
  while (std::getline(cg, line)) {  // "hierarchy-id:controllers:path"
    const auto a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.substr(0, a) == "0" && controllers.empty()) {
      cgroup_limits(cgroup_root, path, true, &m.sources);               // v2 (unified)
      cgroup_limits(cgroup_root + "/unified", path, true, &m.sources);  // hybrid layout
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      cgroup_limits(cgroup_root + "/memory", path, false, &m.sources);
    }
  }

  rlimit rl{};
  if (::getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    const uint64_t reserved =
        minus(kb_field("/proc/self/status", "VmSize"), kb_field("/proc/self/status", "VmRSS"));
    m.sources.push_back({"RLIMIT_AS (ulimit -v)", rl.rlim_cur, minus(rl.rlim_cur, reserved)});
  }

  for (const MemoryLimitSource& s : m.sources) {
    if (m.binding.empty() || s.usable < m.usable) {
      m.usable = s.usable;
      m.binding = s.name;
    }
  }
  return m;
}

}  // namespace flotilla
