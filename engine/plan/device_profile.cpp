// Device profiles for the planner: this CPU (from its specification, or measured with sgemm) and
// named GPUs from their data sheets.
//
// Decision: the default CPU profile is computed, not measured, so `plan` answers instantly; the
// spec figure (cores x clock x FP32 FLOP/cycle) is an upper bound that `--measure` (a short BLAS
// sgemm, the same peak `bench` divides by) or `--device-flops` replace when precision matters.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/cpu/blas.h"
#include "engine/plan/memory_limit.h"
#include "engine/plan/planner.h"

namespace flotilla {
namespace {

struct CpuSpec {
  std::string model;
  int physical_cores = 1;
  double mhz = 2500;
  int flops_per_cycle = 8;  // FP32, per core
  std::string simd = "SSE";
};

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  const auto e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

CpuSpec read_cpu_spec() {
  CpuSpec spec;
  std::ifstream f("/proc/cpuinfo");
  std::string line, phys, flags;
  std::set<std::pair<std::string, std::string>> cores;
  int logical = 0;
  bool first_mhz = true;
  while (std::getline(f, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = trim(line.substr(0, colon)), value = trim(line.substr(colon + 1));
    if (key == "processor")
      ++logical;
    else if (key == "model name" && spec.model.empty())
      spec.model = value;
    else if (key == "physical id")
      phys = value;
    else if (key == "core id")
      cores.insert({phys, value});
    else if (key == "flags" && flags.empty())
      flags = " " + value + " ";
    else if (key == "cpu MHz" && first_mhz) {
      spec.mhz = std::max(1.0, std::atof(value.c_str()));
      first_mhz = false;
    }
  }
  spec.physical_cores = std::max<int>(1, cores.empty() ? logical : static_cast<int>(cores.size()));
  const auto has = [&](const char* flag) {
    return flags.find(std::string(" ") + flag + " ") != std::string::npos;
  };
  const bool amd = spec.model.find("AMD") != std::string::npos;
  // Two FMA pipes per core: 256-bit -> 2 x 8 lanes x 2 FLOP = 32; Intel AVX-512 (512-bit pipes) 64.
  // AMD Zen 2-4 execute AVX-512 on 256-bit pipes, so they stay at 32.
  if (has("avx512f") && !amd) {
    spec.flops_per_cycle = 64;
    spec.simd = "AVX-512 FMA";
  } else if (has("avx2") && has("fma")) {
    spec.flops_per_cycle = 32;
    spec.simd = has("avx512f") ? "AVX-512 on 256-bit FMA pipes" : "AVX2 FMA";
  } else if (has("avx")) {
    spec.flops_per_cycle = 16;
    spec.simd = "AVX";
  }
  return spec;
}

uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

// A typical Gloo TCP-loopback all-reduce bus bandwidth; `bench-comm` measures the real one.
constexpr double kCpuLoopbackBytesPerS = 2e9;

struct GpuSheet {
  const char* name;
  double bf16_flops;  // dense, FP32 accumulate
  double tf32_flops;  // what fp32 matmuls get with TF32 tensor cores
  double mem_bytes;
  double link_bytes_per_s;  // typical all-reduce bus bandwidth in one node (nccl-tests busbw)
  const char* note;
};

const std::vector<GpuSheet>& gpu_sheets() {
  static const std::vector<GpuSheet> sheets = {
      {"a100-80gb", 312e12, 156e12, 80.0 * (1ull << 30), 230e9, "A100 SXM 80GB, NVLink 3"},
      // The 40 GB A100 (same data-sheet peaks as the 80 GB one): the card the "LoRA 1 x 40 GB" of
      // the fine-tune summary (recommend.h) names.
      {"a100-40gb", 312e12, 156e12, 40.0 * (1ull << 30), 230e9, "A100 SXM 40GB, NVLink 3"},
      {"h100-sxm", 989e12, 494e12, 80.0 * (1ull << 30), 450e9, "H100 SXM 80GB, NVLink 4"},
      {"h200", 989e12, 494e12, 141e9, 450e9, "H200 SXM 141GB, NVLink 4"},
      // NVIDIA A10 data sheet: BF16 Tensor Core 125 TFLOPS, TF32 62.5 (dense; 250 / 125 with
      // sparsity), 24 GB GDDR6, PCIe Gen4: the 24 GB data-center card people LoRA-tune 7-8B models on.
      {"a10-24gb", 125e12, 62.5e12, 24.0 * (1ull << 30), 20e9, "A10 24GB, PCIe 4"},
      {"l4", 121e12, 60e12, 24.0 * (1ull << 30), 20e9, "L4 24GB, PCIe 4"},
      {"rtx-4090", 165e12, 82.6e12, 24.0 * (1ull << 30), 20e9, "RTX 4090 24GB, PCIe 4"},
      // NVIDIA L40S data sheet: BF16 Tensor Core 362 TFLOPS, TF32 183 (dense), 48 GB GDDR6, PCIe 4:
      // the 48 GB class (with the RTX 6000 Ada) that four-card 70B QLoRA setups use.
      {"l40s", 362e12, 183e12, 48.0 * (1ull << 30), 20e9, "L40S 48GB, PCIe 4"},
  };
  return sheets;
}

}  // namespace

DeviceProfile cpu_profile_nominal(int threads) {
  const CpuSpec spec = read_cpu_spec();
  const int cores = threads > 0 ? std::min(threads, spec.physical_cores) : spec.physical_cores;
  DeviceProfile p;
  p.flops_per_s = cores * spec.mhz * 1e6 * spec.flops_per_cycle;
  const MemoryLimit limit = usable_memory();
  p.mem_bytes = limit.usable > 0 ? limit.usable : physical_memory_bytes();
  p.mem_note = limit.usable > 0 ? limit.describe() : "physical memory (no limit could be read)";
  p.mem_shared_by_ranks = true;
  p.link_bytes_per_s = kCpuLoopbackBytesPerS;
  char buf[256];
  std::snprintf(buf, sizeof buf, "cpu: %d core%s x %.2f GHz x %d FP32 FLOP/cycle (%s), nominal", cores,
                cores == 1 ? "" : "s", spec.mhz / 1000, spec.flops_per_cycle, spec.simd.c_str());
  p.name = buf;
  return p;
}

DeviceProfile cpu_profile_measured(int threads, double seconds) {
  DeviceProfile p = cpu_profile_nominal(threads);
  if (threads > 0) cpu::blas_set_threads(threads);
  const int n = 1024;
  std::vector<float> a(static_cast<size_t>(n) * n), b(a.size()), c(a.size(), 0.0f);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>((i * 7919) % 1000) / 1000.0f - 0.5f;
    b[i] = static_cast<float>((i * 104729) % 1000) / 1000.0f - 0.5f;
  }
  const auto gemm = [&] {
    cpu::blas_sgemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  };
  gemm();  // warm-up: thread pool and caches
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  double best = 0;
  int runs = 0;
  while (runs < 3 || std::chrono::duration<double>(clock::now() - start).count() < seconds) {
    const auto t0 = clock::now();
    gemm();
    const double dt = std::chrono::duration<double>(clock::now() - t0).count();
    best = std::max(best, 2.0 * n * n * n / dt);
    ++runs;
  }
  p.flops_per_s = best;
  const int shown = threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency());
  p.name = "cpu: measured sgemm " + std::to_string(n) + "^3 on " + std::to_string(shown) + " thread" +
           (shown == 1 ? "" : "s");
  return p;
}

std::vector<std::string> gpu_profile_names() {
  std::vector<std::string> out;
  for (const auto& g : gpu_sheets()) out.emplace_back(g.name);
  return out;
}

bool find_gpu_profile(const std::string& name, const std::string& dtype, DeviceProfile* out) {
  for (const auto& g : gpu_sheets()) {
    if (name != g.name) continue;
    out->name = std::string(g.name) + " (" + g.note + "; data-sheet dense " +
                (dtype == "bf16" ? "bf16" : "tf32") + " peak)";
    out->flops_per_s = dtype == "bf16" ? g.bf16_flops : g.tf32_flops;
    out->mem_bytes = static_cast<uint64_t>(g.mem_bytes);
    out->link_bytes_per_s = g.link_bytes_per_s;
    return true;
  }
  return false;
}

}  // namespace flotilla
