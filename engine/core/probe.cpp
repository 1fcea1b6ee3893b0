// Machine probe: /proc, uname, cpuid and (through the CUDA plugin) the CUDA runtime; timed TCP
// connects for probe --connect (see probe.h).
#include "engine/core/probe.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/backend/cuda_plugin.h"
#include "engine/core/error.h"
#include "engine/cpu/blas.h"
#include "engine/cpu/peak_cache.h"
#include "flotilla/build_info.h"

namespace flotilla {
namespace {

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t\n\"");
  const auto e = s.find_last_not_of(" \t\n\"");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::string os_pretty_name() {
  std::ifstream f("/etc/os-release");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("PRETTY_NAME=", 0) == 0) return trim(line.substr(12));
  return "Linux";
}

void read_cpuinfo(ProbeResult& p) {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  std::set<std::pair<std::string, std::string>> cores;  // (physical id, core id)
  std::string phys, core;
  int logical = 0;
  while (std::getline(f, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = trim(line.substr(0, colon));
    const std::string value = trim(line.substr(colon + 1));
    if (key == "processor") ++logical;
    if (key == "model name" && p.cpu_model.empty()) p.cpu_model = value;
    if (key == "physical id") phys = value;
    if (key == "core id") {
      core = value;
      cores.insert({phys, core});
    }
  }
  p.logical_cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  if (p.logical_cpus <= 0) p.logical_cpus = logical;
  p.physical_cores = cores.empty() ? p.logical_cpus : static_cast<int>(cores.size());
}

void read_meminfo(ProbeResult& p) {
  std::ifstream f("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (f >> key >> kb) {
    std::getline(f, unit);
    if (key == "MemTotal:") p.memory_total_bytes = kb * 1024;
    if (key == "MemAvailable:") p.memory_available_bytes = kb * 1024;
  }
}

// The engine's own cpuid/xgetbv reading (cpu_features.h): what the kernels actually use.
void probe_simd(ProbeResult& p) {
  const cpu::CpuFeatures& f = cpu::cpu_features();
  p.avx2 = f.os_avx && f.avx2;
  p.fma = f.os_avx && f.fma;
  p.avx512f = f.os_avx512 && f.avx512f;
  p.avx512bw = f.os_avx512 && f.avx512bw;
  p.avx512vl = f.os_avx512 && f.avx512vl;
  p.avx512bf16 = f.os_avx512 && f.avx512_bf16;
  p.amx_tile = f.os_amx && f.amx_tile;
  p.amx_bf16 = f.os_amx && f.amx_bf16;
  p.amx_permitted = f.amx_permitted;
  p.kernel_path = cpu::kernel_path_name(cpu::choose_kernel_path(f).widest);
}

// A program that cannot load the CUDA plugin (the app) asks the flotilla-worker beside it for the
// GPU part of its probe. False when there is no such worker or its answer cannot be read.
bool probe_gpus_through_worker(ProbeResult& p) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return false;
  std::string worker(self, static_cast<size_t>(n));
  worker = worker.substr(0, worker.rfind('/') + 1) + "flotilla-worker";
  if (access(worker.c_str(), X_OK) != 0 || worker.find('\'') != std::string::npos) return false;
  FILE* f = popen(("'" + worker + "' probe --json --no-peak 2>/dev/null").c_str(), "r");
  if (f == nullptr) return false;
  std::string text;
  char buf[4096];
  for (size_t got; (got = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, got);
  if (pclose(f) != 0) return false;
  using nlohmann::json;
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.contains("gpu") || !j.contains("versions")) return false;
  auto str = [](const json& o, const char* key) {
    return o.contains(key) && o[key].is_string() ? o[key].get<std::string>() : std::string();
  };
  const json& gpu = j["gpu"];
  p.gpu_status = str(gpu, "status");
  for (const json& d : gpu.value("devices", json::array())) {
    GpuInfo g;
    g.index = d.value("index", 0);
    g.name = str(d, "name");
    g.memory_total_bytes = d.value("memory_total_bytes", uint64_t{0});
    g.memory_free_bytes = d.value("memory_free_bytes", uint64_t{0});
    const std::string cc = str(d, "compute_capability");
    const auto dot = cc.find('.');
    g.cc_major = std::atoi(cc.c_str());
    g.cc_minor = dot == std::string::npos ? 0 : std::atoi(cc.c_str() + dot + 1);
    g.multiprocessors = d.value("multiprocessors", 0);
    g.pci_bus_id = str(d, "pci_bus_id");
    p.gpus.push_back(g);
  }
  if (gpu.contains("plugin") && gpu["plugin"].is_object()) {
    const json& pl = gpu["plugin"];
    p.cuda_plugin = str(pl, "path");
    p.cuda_plugin_error = str(pl, "error");
    for (const json& l : pl.value("libraries", json::array()))
      p.cuda_libraries.push_back({str(l, "soname"), str(l, "path"), str(l, "package")});
  }
  const json& v = j["versions"];
  p.cuda_driver = str(v, "cuda_driver");
  p.cuda_runtime = str(v, "cuda_runtime");
  p.cublas = str(v, "cublas");
  p.nccl = str(v, "nccl");
  return true;
}

void probe_gpus(ProbeResult& p) {
  if (cuda_plugin::built() && !cuda_plugin::host() && probe_gpus_through_worker(p)) return;
  const cuda_plugin::PluginStatus plugin = cuda_plugin::status();
  p.cuda_plugin = plugin.path;
  p.cuda_plugin_error = plugin.error;
  p.cuda_libraries = plugin.libraries;
  std::string why;
  if (const cuda_plugin::CudaApi* cuda = cuda_plugin::api(&why)) {
    cuda->probe_gpus(p);  // engine/cuda/plugin_api.cpp
  } else {
    p.gpu_status = "no GPU: " + why;
  }
}

// `v` safe to show in a message: control bytes escaped, at most 60 characters.
std::string shown(const std::string& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i == 60) {
      out += "...";
      break;
    }
    const auto u = static_cast<unsigned char>(v[i]);
    if (u < 0x20 || u == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", u);
      out += buf;
    } else {
      out += v[i];
    }
  }
  return out;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alnum(char c) { return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Dotted quad, four numbers 0-255, no leading zeros (0127.0.0.1 reads as octal elsewhere).
bool is_ipv4(const std::string& v) {
  int parts = 0;
  size_t i = 0;
  while (true) {
    const size_t dot = v.find('.', i);
    const std::string part = v.substr(i, dot == std::string::npos ? std::string::npos : dot - i);
    if (part.empty() || part.size() > 3 || (part.size() > 1 && part[0] == '0')) return false;
    for (char c : part)
      if (!is_digit(c)) return false;
    if (std::stoi(part) > 255 || ++parts > 4) return false;
    if (dot == std::string::npos) break;
    i = dot + 1;
  }
  return parts == 4;
}

// "" for an acceptable port text (plain digits, no leading zero, 1-65535), else why not.
std::string port_problem(const std::string& p) {
  if (p.empty()) return "has no port";
  for (char c : p)
    if (!is_digit(c)) return "has port '" + shown(p) + "', which is not plain digits";
  if (p.size() > 1 && p[0] == '0') return "has port '" + p + "' with a leading zero";
  if (p.size() > 5 || std::stol(p) < 1 || std::stol(p) > 65535) return "has port " + p + ", outside 1-65535";
  return "";
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// One non-blocking connect to `ai`: the milliseconds it took, or -1 with `error` set.
double timed_connect(const addrinfo& ai, double timeout_s, std::string& error) {
  const int fd = ::socket(ai.ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, ai.ai_protocol);
  if (fd < 0) {
    error = "unreachable: socket: " + errno_string(errno);
    return -1;
  }
  const auto t0 = std::chrono::steady_clock::now();
  int rc = ::connect(fd, ai.ai_addr, ai.ai_addrlen);
  int err = rc == 0 ? 0 : errno;
  if (rc != 0 && err == EINPROGRESS) {
    err = ETIMEDOUT;
    while (true) {
      const double left_ms = timeout_s * 1000.0 - ms_since(t0);
      if (left_ms <= 0) break;
      pollfd pfd{fd, POLLOUT, 0};
      rc = ::poll(&pfd, 1, std::max(1, static_cast<int>(left_ms)));
      if (rc < 0 && errno == EINTR) continue;
      if (rc <= 0) break;
      socklen_t len = sizeof err;
      if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      break;
    }
  }
  const double ms = ms_since(t0);
  if (err == 0) {
    const linger reset{1, 0};  // close with RST: nothing lingers in TIME_WAIT on either side
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
  }
  ::close(fd);
  if (err == 0) return ms;
  if (err == ECONNREFUSED)
    error = "refused";
  else if (err == ETIMEDOUT)
    error = "timed out";
  else
    error = "unreachable: " + errno_string(err);
  return -1;
}

}  // namespace

ProbeResult probe_machine(bool measure_peak) {
  ProbeResult p;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  p.hostname = host;
  utsname u{};
  if (uname(&u) == 0) {
    p.kernel = u.release;
    p.arch = u.machine;
  }
  p.os = os_pretty_name();
  read_cpuinfo(p);
  read_meminfo(p);
  probe_simd(p);
  probe_gpus(p);
  const cpu::BlasInfo& blas = cpu::blas_info();
  p.blas = trim(blas.config);
  p.blas_core = blas.loaded_core;
  p.sgemm_path = cpu::kernel_path_name(blas.sgemm_path);
  if (measure_peak) {
    const int threads = p.physical_cores > 0 ? p.physical_cores : 1;
    const cpu::CpuPeak peak = cpu::measure_cpu_peak(threads, 0.25, true);
    p.peak_threads = threads;
    p.fp32_fma_gflops = peak.fp32_fma_gflops;
    p.bf16_dot_gflops = peak.bf16_dot_gflops;
    p.sgemm_gflops = peak.sgemm_gflops;
    p.peak_other_load = peak.other_load;
    p.peak_contended = peak.contended;
    p.peak_kept = cpu::store_peak(cpu::peak_cache_path(), peak);
  }
  p.worker_version = FLOTILLA_VERSION_STRING;
  p.compiler = FLOTILLA_CXX_COMPILER;
  return p;
}

std::string connect_host_problem(const std::string& host) {
  if (host.empty()) return "the host is empty";
  const std::string name = "host '" + shown(host) + "'";
  if (host.size() > 253) return name + " is longer than 253 characters";
  if (host.front() == '[') {
    in6_addr addr{};
    if (host.size() < 3 || host.back() != ']')
      return name + " opens '[' for an IPv6 address but does not close it";
    if (inet_pton(AF_INET6, host.substr(1, host.size() - 2).c_str(), &addr) != 1)
      return name + " is not a valid bracketed IPv6 address";
    return "";
  }
  bool digits_and_dots = true;
  for (char c : host) {
    if (c == ':') return name + " contains ':'; write an IPv6 address in brackets, e.g. [fd00::5]:22";
    if (!is_alnum(c) && c != '-' && c != '.')
      return name + " contains '" + shown(std::string(1, c)) + "' (a host has letters, digits, '-' and '.')";
    if (!is_digit(c) && c != '.') digits_and_dots = false;
  }
  if (digits_and_dots) return is_ipv4(host) ? "" : name + " is not a valid IPv4 address (four numbers 0-255)";
  size_t i = 0;
  while (true) {
    const size_t dot = host.find('.', i);
    const std::string label = host.substr(i, dot == std::string::npos ? std::string::npos : dot - i);
    if (label.empty()) return name + " has an empty label (two dots in a row, or a dot at an end)";
    if (label.size() > 63) return name + " has a label longer than 63 characters";
    if (label.front() == '-' || label.back() == '-')
      return name + " has a label that starts or ends with '-'";
    if (dot == std::string::npos) break;
    i = dot + 1;
  }
  return "";
}

std::vector<ConnectTarget> parse_connect_targets(const std::string& list, const std::string& option) {
  const std::string hint = "; write HOST:PORT[,HOST:PORT...], e.g. 10.0.0.5:22,[fd00::5]:2222";
  if (list.empty()) throw_usage(option + " is empty" + hint);
  std::vector<ConnectTarget> out;
  size_t start = 0;
  while (true) {
    const size_t comma = list.find(',', start);
    const std::string item =
        list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const std::string what = option + ": target '" + shown(item) + "' ";
    if (item.empty())
      throw_usage(option + " has an empty target (two commas in a row, or one at an end)" + hint);
    size_t colon = std::string::npos;
    if (item.front() == '[') {
      const size_t close = item.find(']');
      if (close != std::string::npos && close + 1 < item.size() && item[close + 1] == ':') colon = close + 1;
    } else {
      colon = item.rfind(':');
    }
    if (colon == std::string::npos || colon == 0) throw_usage(what + "needs a port after ':'" + hint);
    ConnectTarget t;
    t.host = item.substr(0, colon);
    const std::string port = item.substr(colon + 1);
    if (const std::string why = connect_host_problem(t.host); !why.empty())
      throw_usage(what + "is refused: " + why + hint);
    if (const std::string why = port_problem(port); !why.empty()) throw_usage(what + why + hint);
    t.port = static_cast<int>(std::stol(port));
    out.push_back(t);
    if (static_cast<int>(out.size()) > kMaxConnectTargets)
      throw_usage(option + " lists more than " + std::to_string(kMaxConnectTargets) + " targets");
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

ConnectProbe probe_connect(const ConnectTarget& target, int count, double timeout_s) {
  ConnectProbe r;
  r.target = target;
  r.attempts = std::clamp(count, 1, kMaxConnectCount);
  std::string host = target.host;
  const bool v6 = !host.empty() && host.front() == '[';
  if (v6) host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_family = v6 ? AF_INET6 : AF_UNSPEC;
  hints.ai_flags = AI_NUMERICSERV | (v6 ? AI_NUMERICHOST : 0);
  addrinfo* res = nullptr;
  const int gai = ::getaddrinfo(host.c_str(), std::to_string(target.port).c_str(), &hints, &res);
  if (gai != 0 || !res) {
    r.error = std::string("unresolvable: ") + (gai == EAI_SYSTEM ? errno_string(errno) : gai_strerror(gai));
    if (res) ::freeaddrinfo(res);
    return r;
  }
  std::vector<double> ms;
  std::string error;
  for (int i = 0; i < r.attempts; ++i) {
    const double t = timed_connect(*res, timeout_s, error);
    if (t >= 0) ms.push_back(t);
  }
  ::freeaddrinfo(res);
  r.answered = static_cast<int>(ms.size());
  if (ms.empty()) {
    r.error = error;
    return r;
  }
  std::sort(ms.begin(), ms.end());
  r.min_ms = ms.front();
  const size_t n = ms.size();
  r.median_ms = n % 2 == 1 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2;
  return r;
}

std::string probe_to_json(const ProbeResult& p) {
  using nlohmann::json;
  json gpus = json::array();
  for (const auto& g : p.gpus) {
    gpus.push_back({{"index", g.index},
                    {"name", g.name},
                    {"memory_total_bytes", g.memory_total_bytes},
                    {"memory_free_bytes", g.memory_free_bytes},
                    {"compute_capability", std::to_string(g.cc_major) + "." + std::to_string(g.cc_minor)},
                    {"multiprocessors", g.multiprocessors},
                    {"pci_bus_id", g.pci_bus_id}});
  }
  auto opt = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  json j = {
      {"schema_version", 1},
      {"worker_version", p.worker_version},
      {"host", {{"hostname", p.hostname}, {"os", p.os}, {"kernel", p.kernel}, {"arch", p.arch}}},
      {"cpu",
       {{"model", p.cpu_model},
        {"logical_cpus", p.logical_cpus},
        {"physical_cores", p.physical_cores},
        {"simd",
         {{"avx2", p.avx2},
          {"fma", p.fma},
          {"avx512f", p.avx512f},
          {"avx512_bf16", p.avx512bf16},
          {"avx512bw", p.avx512bw},
          {"avx512vl", p.avx512vl},
          {"amx_tile", p.amx_tile},
          {"amx_bf16", p.amx_bf16},
          {"amx_permitted", p.amx_permitted}}},
        {"kernel_path", p.kernel_path},
        {"sgemm_path", p.sgemm_path}}},
      {"memory", {{"total_bytes", p.memory_total_bytes}, {"available_bytes", p.memory_available_bytes}}},
      {"gpu", {{"status", p.gpu_status}, {"count", p.gpus.size()}, {"devices", gpus}}},
      {"versions",
       {{"cuda_driver", opt(p.cuda_driver)},
        {"cuda_runtime", opt(p.cuda_runtime)},
        {"cublas", opt(p.cublas)},
        {"nccl", opt(p.nccl)},
        {"gloo", opt(p.gloo)},
        {"blas", opt(p.blas)},
        {"blas_core", opt(p.blas_core)},
        {"compiler", p.compiler}}},
  };
  if (cuda_plugin::built()) {
    json libs = json::array();
    for (const auto& l : p.cuda_libraries)
      libs.push_back(
          {{"soname", l.soname}, {"found", !l.path.empty()}, {"path", opt(l.path)}, {"package", l.package}});
    j["gpu"]["plugin"] = {{"path", opt(p.cuda_plugin)},
                          {"loaded", p.cuda_plugin_error.empty()},
                          {"error", opt(p.cuda_plugin_error)},
                          {"libraries", libs}};
  }
  if (p.peak_threads > 0) {
    auto gf = [](double v) { return v > 0 ? json(v) : json(nullptr); };
    j["cpu"]["peak"] = {{"threads", p.peak_threads},
                        {"fp32_fma_gflops", gf(p.fp32_fma_gflops)},
                        {"bf16_dot_gflops", gf(p.bf16_dot_gflops)},
                        {"sgemm_gflops", gf(p.sgemm_gflops)},
                        {"other_cpu_load", p.peak_other_load},
                        {"contended", p.peak_contended},
                        {"kept", p.peak_kept}};
  }
  if (!p.connect.empty()) {
    json targets = json::array();
    for (const auto& c : p.connect) {
      auto ms = [](double v) { return v < 0 ? json(nullptr) : json(v); };
      targets.push_back({{"target", c.target.text()},
                         {"host", c.target.host},
                         {"port", c.target.port},
                         {"attempts", c.attempts},
                         {"answered", c.answered},
                         {"min_ms", ms(c.min_ms)},
                         {"median_ms", ms(c.median_ms)},
                         {"error", c.error.empty() ? json(nullptr) : json(c.error)}});
    }
    j["connect"] = targets;
  }
  return j.dump(2);
}

std::string probe_to_text(const ProbeResult& p) {
  auto gib = [](uint64_t b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(b) / (1024.0 * 1024.0 * 1024.0));
    return std::string(buf);
  };
  auto or_none = [](const std::string& s) { return s.empty() ? std::string("not available") : s; };
  std::ostringstream o;
  o << "Host      " << p.hostname << " (" << p.os << ", Linux " << p.kernel << ", " << p.arch << ")\n";
  o << "CPU       " << p.cpu_model << ": " << p.physical_cores << " cores, " << p.logical_cpus
    << " threads\n";
  o << "SIMD      AVX2 " << (p.avx2 ? "yes" : "no") << ", FMA " << (p.fma ? "yes" : "no") << ", AVX-512 "
    << (p.avx512f ? "yes" : "no") << ", AVX-512 BF16 " << (p.avx512bf16 ? "yes" : "no") << ", AMX-BF16 "
    << (p.amx_bf16 ? "yes" : "no") << (p.amx_bf16 && !p.amx_permitted ? " (not permitted by the kernel)" : "")
    << "\n";
  o << "Kernels   widest path " << p.kernel_path << "; fp32 sgemm runs " << p.sgemm_path << " (OpenBLAS core "
    << p.blas_core << ")\n";
  if (p.peak_threads > 0) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "Peak      %d threads: fp32 FMA %.1f GFLOP/s, bf16 dot %s, sgemm %.1f GFLOP/s "
                  "(other processes %.0f%% of the CPUs%s)\n",
                  p.peak_threads, p.fp32_fma_gflops,
                  p.bf16_dot_gflops > 0
                      ? (std::to_string(static_cast<int>(p.bf16_dot_gflops)) + " GFLOP/s").c_str()
                      : "none",
                  p.sgemm_gflops, p.peak_other_load * 100,
                  p.peak_kept        ? "; kept as this machine's peak (the highest trusted reading stays)"
                  : p.peak_contended ? "; the FMA ceiling read below the sgemm: cores shared at the host, not kept"
                                     : ": loaded, not kept as a peak");
    o << buf;
  }
  o << "Memory    " << gib(p.memory_total_bytes) << " total, " << gib(p.memory_available_bytes)
    << " available\n";
  if (p.gpus.empty()) {
    o << "GPUs      none (" << p.gpu_status << ")\n";
  } else {
    for (const auto& g : p.gpus)
      o << "GPU " << g.index << "     " << g.name << ", " << gib(g.memory_total_bytes) << ", compute "
        << g.cc_major << "." << g.cc_minor << ", " << g.multiprocessors << " SMs\n";
  }
  if (cuda_plugin::built()) {
    o << "Plugin    " << (p.cuda_plugin.empty() ? std::string("not found") : p.cuda_plugin)
      << (p.cuda_plugin_error.empty() ? " (loaded)" : "") << "\n";
    for (const auto& l : p.cuda_libraries)
      o << "  " << l.soname << "  "
        << (l.path.empty() ? "missing: install " + l.package : "found (" + l.path + ")") << "\n";
  }
  o << "Driver    " << or_none(p.cuda_driver) << "\n";
  o << "CUDA      " << or_none(p.cuda_runtime) << "\n";
  o << "cuBLAS    " << or_none(p.cublas) << "\n";
  o << "NCCL      " << or_none(p.nccl) << "\n";
  o << "Gloo      " << or_none(p.gloo) << "\n";
  o << "BLAS      " << or_none(p.blas) << (p.blas_core.empty() ? "" : " (kernel " + p.blas_core + ")")
    << "\n";
  o << "Worker    " << p.worker_version << " (" << p.compiler << ")\n";
  for (const auto& c : p.connect) {
    o << "Connect   " << c.target.text() << "  ";
    if (!c.error.empty()) {
      o << c.error << "\n";
      continue;
    }
    char buf[96];
    std::snprintf(buf, sizeof buf, "min %.2f ms, median %.2f ms (%d of %d connects)", c.min_ms, c.median_ms,
                  c.answered, c.attempts);
    o << buf << "\n";
  }
  return o.str();
}

}  // namespace flotilla
