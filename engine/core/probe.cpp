// Machine probe: /proc, uname, cpuid and (when built with CUDA) the CUDA runtime.
#include "engine/core/probe.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "flotilla/build_info.h"

#ifdef FLOTILLA_HAVE_CUDA
#include <cublas_api.h>
#include <cuda_runtime_api.h>
#endif
#ifdef FLOTILLA_HAVE_NCCL
#include <nccl.h>
#endif

extern "C" {
// OpenBLAS introspection (declared in its cblas.h, which we avoid pulling in here).
char* openblas_get_config(void);
char* openblas_get_corename(void);
}

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

void probe_simd(ProbeResult& p) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  p.avx2 = __builtin_cpu_supports("avx2");
  p.fma = __builtin_cpu_supports("fma");
  p.avx512f = __builtin_cpu_supports("avx512f");
  p.avx512bf16 = __builtin_cpu_supports("avx512bf16");
  // AMX has no __builtin_cpu_supports name in GCC 12: read the kernel's flag list.
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("flags", 0) == 0) {
      p.amx_bf16 = line.find(" amx_bf16") != std::string::npos;
      break;
    }
  }
#endif
}

[[maybe_unused]] std::string version_string(int v, int major_div, int minor_div, int minor_mod) {
  std::ostringstream s;
  s << v / major_div << "." << (v / minor_div) % minor_mod;
  return s.str();
}

void probe_gpus(ProbeResult& p) {
#ifdef FLOTILLA_HAVE_CUDA
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  p.cuda_runtime = version_string(runtime, 1000, 10, 100);
  int cublas_major = 0, cublas_minor = 0, cublas_patch = 0;
  cublasGetProperty(MAJOR_VERSION, &cublas_major);
  cublasGetProperty(MINOR_VERSION, &cublas_minor);
  cublasGetProperty(PATCH_LEVEL, &cublas_patch);
  p.cublas =
      std::to_string(cublas_major) + "." + std::to_string(cublas_minor) + "." + std::to_string(cublas_patch);
  int driver = 0;
  cudaDriverGetVersion(&driver);
  if (driver > 0) p.cuda_driver = version_string(driver, 1000, 10, 100);
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    p.gpu_status = std::string("no GPU: ") + cudaGetErrorString(err);
    cudaGetLastError();
    return;
  }
  if (count == 0) {
    p.gpu_status = "no GPU: the CUDA driver reports no devices";
    return;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    GpuInfo g;
    g.index = i;
    g.name = prop.name;
    g.memory_total_bytes = prop.totalGlobalMem;
    g.cc_major = prop.major;
    g.cc_minor = prop.minor;
    g.multiprocessors = prop.multiProcessorCount;
    char bus[32] = {0};
    if (cudaDeviceGetPCIBusId(bus, sizeof bus, i) == cudaSuccess) g.pci_bus_id = bus;
    size_t free_b = 0, total_b = 0;
    if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
      g.memory_free_bytes = free_b;
    p.gpus.push_back(g);
  }
  p.gpu_status = "ok";
#else
  p.gpu_status = "no GPU: this worker was built without CUDA (FLOTILLA_CUDA=OFF or no nvcc at build time)";
#endif
#ifdef FLOTILLA_HAVE_NCCL
  int nv = 0;
  if (ncclGetVersion(&nv) == ncclSuccess) {
    // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
    p.nccl =
        std::to_string(nv / 10000) + "." + std::to_string((nv / 100) % 100) + "." + std::to_string(nv % 100);
  }
#endif
}

}  // namespace

ProbeResult probe_machine() {
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
  if (const char* cfg = openblas_get_config()) p.blas = trim(cfg);
  if (const char* core = openblas_get_corename()) p.blas_core = core;
  p.worker_version = FLOTILLA_VERSION_STRING;
  p.compiler = FLOTILLA_CXX_COMPILER;
  return p;
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
          {"amx_bf16", p.amx_bf16}}}}},
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
    << (p.amx_bf16 ? "yes" : "no") << "\n";
  o << "Memory    " << gib(p.memory_total_bytes) << " total, " << gib(p.memory_available_bytes)
    << " available\n";
  if (p.gpus.empty()) {
    o << "GPUs      none (" << p.gpu_status << ")\n";
  } else {
    for (const auto& g : p.gpus)
      o << "GPU " << g.index << "     " << g.name << ", " << gib(g.memory_total_bytes) << ", compute "
        << g.cc_major << "." << g.cc_minor << ", " << g.multiprocessors << " SMs\n";
  }
  o << "Driver    " << or_none(p.cuda_driver) << "\n";
  o << "CUDA      " << or_none(p.cuda_runtime) << "\n";
  o << "cuBLAS    " << or_none(p.cublas) << "\n";
  o << "NCCL      " << or_none(p.nccl) << "\n";
  o << "Gloo      " << or_none(p.gloo) << "\n";
  o << "BLAS      " << or_none(p.blas) << (p.blas_core.empty() ? "" : " (kernel " + p.blas_core + ")")
    << "\n";
  o << "Worker    " << p.worker_version << " (" << p.compiler << ")\n";
  return o.str();
}

}  // namespace flotilla
