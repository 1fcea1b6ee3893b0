// This machine's figures for the planner: the kept CPU peak (engine/cpu/peak_cache.h), the kernel
// path the engine picks, and link figures bench-comm measured and kept (comm-links.json).
//
// Decision: link figures are kept per backend and world size on this host, fitted as one latency
// (the smallest message's time) plus one bandwidth (the median over messages of 1 MiB and more
// after that latency): the two numbers the planner's time = latency x calls + bytes / bandwidth needs,
// rather than bench-comm's whole table.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "engine/cpu/cpu_features.h"
#include "engine/cpu/peak.h"
#include "engine/cpu/peak_cache.h"
#include "engine/plan/calibration.h"

namespace flotilla {
namespace {

// Gloo over TCP loopback, 2 ranks, on the 2-core reference machine while other work kept its load
// average near 14 (`flotilla-worker launch --nproc-per-node 2 -- bench-comm --ops all_reduce
// --bytes 1K..64M`, docs/planner.md): 1.77 ms per small all_reduce, 0.31 GB/s bus bandwidth over
// 1-64 MiB after that latency (median). A quiet machine is faster; bench-comm keeps its own figures.
constexpr double kLoopbackLatencyS = 1.8e-3;
constexpr double kLoopbackBytesPerS = 0.31e9;

std::string link_key(const std::string& backend, int world_size) {
  return backend + " | " + std::to_string(world_size) + " ranks";
}

nlohmann::json read_object(const std::string& path) {
  std::ifstream in(path);
  if (!in) return nlohmann::json::object();
  try {
    auto j = nlohmann::json::parse(in);
    return j.is_object() ? j : nlohmann::json::object();
  } catch (const std::exception&) {
    return nlohmann::json::object();  // damaged: measured again and rewritten, never trusted
  }
}

}  // namespace

int rank_threads(const RunConfig& config) {
  if (config.run.threads > 0) return config.run.threads;
  const int local_ranks = std::max(1, config.parallel.dp * config.parallel.tp * config.parallel.pp);
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return std::max(1, static_cast<int>(cores) / local_ranks);
}

LinkFigures default_loopback_link() {
  return {kLoopbackBytesPerS, kLoopbackLatencyS, "default for Gloo on loopback (docs/planner.md)"};
}

LinkFigures fit_link_figures(const std::vector<LinkSample>& all_reduce, int world_size) {
  LinkFigures f;
  if (all_reduce.empty() || world_size < 2) return f;
  f.latency_s = all_reduce.front().time_s;
  for (const auto& s : all_reduce) f.latency_s = std::min(f.latency_s, s.time_s);
  const double bus = 2.0 * (world_size - 1) / world_size;
  std::vector<double> bw;
  for (const auto& s : all_reduce)
    if (s.bytes >= (1 << 20) && s.time_s > f.latency_s)
      bw.push_back(bus * s.bytes / (s.time_s - f.latency_s));
  if (bw.empty()) return f;
  std::sort(bw.begin(), bw.end());
  f.bytes_per_s = bw.size() % 2 ? bw[bw.size() / 2] : 0.5 * (bw[bw.size() / 2 - 1] + bw[bw.size() / 2]);
  return f;
}

std::string link_cache_path() {
  return (std::filesystem::path(cpu::peak_cache_path()).parent_path() / "comm-links.json").string();
}

bool store_link_figures(const std::string& path, const std::string& backend, int world_size,
                        const LinkFigures& f) {
  if (!(f.bytes_per_s > 0)) return false;
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  auto j = read_object(path);
  j[link_key(backend, world_size)] = {{"bytes_per_s", f.bytes_per_s},
                                      {"latency_s", f.latency_s},
                                      {"measured_unix", static_cast<long long>(time(nullptr))}};
  const std::string tmp = path + ".tmp-" + std::to_string(getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return false;
    out << j.dump(2) << "\n";
    if (!out.flush()) return false;
  }
  fs::rename(tmp, path, ec);
  if (ec) fs::remove(tmp, ec);
  return !ec;
}

std::optional<LinkFigures> load_link_figures(const std::string& path, const std::string& backend,
                                             int world_size) {
  const auto j = read_object(path);
  const auto it = j.find(link_key(backend, world_size));
  if (it == j.end() || !it->is_object()) return std::nullopt;
  try {
    LinkFigures f;
    f.bytes_per_s = it->at("bytes_per_s").get<double>();
    f.latency_s = it->at("latency_s").get<double>();
    if (!(f.bytes_per_s > 0) || f.latency_s < 0) return std::nullopt;
    f.source = "bench-comm, kept in " + path;
    return f;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

Calibration machine_calibration(const RunConfig& config, bool measure_if_absent) {
  Calibration cal;
  cal.cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  if (std::ifstream load("/proc/loadavg"); load) load >> cal.load_average;
  const int ranks = config.parallel.dp * config.parallel.tp * config.parallel.pp;
  if (config.run.device == "cpu") {
    const int threads = rank_threads(config);
    const std::string path = cpu::peak_cache_path();
    const cpu::CpuFeatures& features = cpu::cpu_features();
    std::optional<cpu::CpuPeak> peak = cpu::load_cached_peak(path, features.brand, threads);
    std::string source = "kept in " + path;
    if (!peak && measure_if_absent) {
      const cpu::PeakForRun fresh = cpu::peak_for_run(threads);
      peak = fresh.peak;
      source = fresh.source;
    }
    const bool bf16 = config.train.dtype == "bf16";
    const cpu::KernelChoice kernels = cpu::choose_kernel_path(features);
    cal.kernel_path = cpu::kernel_path_name(bf16 ? kernels.bf16 : kernels.fp32);
    if (peak) {
      cal.peak_flops_per_s = cpu::ceiling_flops(*peak, config.train.dtype);
      char buf[96];
      std::snprintf(buf, sizeof buf, "%s ceiling (%s, %d thread%s per rank), ",
                    bf16 ? "bf16 dot" : "fp32 FMA", bf16 ? peak->bf16_isa.c_str() : peak->fp32_isa.c_str(),
                    threads, threads == 1 ? "" : "s");
      cal.peak_source = buf + source + "; matmul path " + cal.kernel_path;
    }
    if (ranks > 1) {
      const auto kept = load_link_figures(link_cache_path(), "gloo", ranks);
      cal.link = kept ? *kept : default_loopback_link();
    }
  } else if (ranks > 1) {
    if (const auto kept = load_link_figures(link_cache_path(), "nccl", ranks)) cal.link = *kept;
  }
  return cal;
}

}  // namespace flotilla
