// cpu-peaks.json reading and writing, and the choice between a kept and a fresh peak.
#include "engine/cpu/peak_cache.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace flotilla::cpu {
namespace {

constexpr int kFreshTries = 2;  // measurements tried for a quiet one before giving up
constexpr double kSecondsPerKernel = 0.2;

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) return nlohmann::json::object();
  try {
    auto j = nlohmann::json::parse(in);
    return j.is_object() ? j : nlohmann::json::object();
  } catch (const std::exception&) {
    return nlohmann::json::object();  // a damaged cache is remeasured and rewritten, never trusted
  }
}

}  // namespace

std::string peak_cache_path() {
  namespace fs = std::filesystem;
  if (const char* d = std::getenv("FLOTILLA_CACHE_DIR"); d != nullptr && *d != '\0')
    return (fs::path(d) / "cpu-peaks.json").string();
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d != nullptr && *d != '\0')
    return (fs::path(d) / "flotilla" / "cpu-peaks.json").string();
  const char* home = std::getenv("HOME");
  return (fs::path(home != nullptr && *home != '\0' ? home : "/tmp") / ".cache" / "flotilla" /
          "cpu-peaks.json")
      .string();
}

// The key names the measurement method: a peak kept by an older, wrong method is not used (method 2:
// the AVX2/SSE loops stopped spilling registers, which had kept AVX2 ceilings at 2/3 of the truth).
std::string peak_cache_key(const std::string& cpu_model, int threads) {
  return cpu_model + " | " + std::to_string(threads) + " threads | method 2";
}

std::optional<CpuPeak> load_cached_peak(const std::string& path, const std::string& cpu_model, int threads) {
  const auto j = read_json(path);
  const auto it = j.find(peak_cache_key(cpu_model, threads));
  if (it == j.end() || !it->is_object()) return std::nullopt;
  try {
    CpuPeak p;
    p.cpu_model = cpu_model;
    p.threads = threads;
    p.fp32_isa = it->at("fp32_isa").get<std::string>();
    p.fp32_fma_gflops = it->at("fp32_fma_gflops").get<double>();
    p.bf16_isa = it->value("bf16_isa", std::string());
    p.bf16_dot_gflops = it->value("bf16_dot_gflops", 0.0);
    p.sgemm_gflops = it->value("sgemm_gflops", 0.0);
    p.other_load = it->at("other_load").get<double>();
    if (!(p.fp32_fma_gflops > 0) || !p.quiet()) return std::nullopt;
    return p;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

bool store_peak(const std::string& path, const CpuPeak& peak) {
  if (!peak.quiet() || !(peak.fp32_fma_gflops > 0)) return false;
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  auto j = read_json(path);
  nlohmann::json e = {
      {"fp32_isa", peak.fp32_isa},     {"fp32_fma_gflops", peak.fp32_fma_gflops},
      {"bf16_isa", peak.bf16_isa},     {"bf16_dot_gflops", peak.bf16_dot_gflops},
      {"other_load", peak.other_load}, {"measured_unix", static_cast<long long>(time(nullptr))}};
  if (peak.sgemm_gflops > 0) e["sgemm_gflops"] = peak.sgemm_gflops;
  j[peak_cache_key(peak.cpu_model, peak.threads)] = e;
  // Unique temporary, then rename: two workers storing at once leave one whole file.
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

PeakForRun peak_for_run(int threads) {
  const std::string path = peak_cache_path();
  const std::string model = cpu_features().brand;
  if (auto cached = load_cached_peak(path, model, threads)) return {*cached, "cache " + path};
  CpuPeak best;
  for (int i = 0; i < kFreshTries; ++i) {
    const CpuPeak p = measure_cpu_peak(threads, kSecondsPerKernel, false);
    if (p.quiet()) {
      const bool kept = store_peak(path, p);
      return {p, kept ? "measured now, kept in " + path : "measured now (could not write " + path + ")"};
    }
    if (p.fp32_fma_gflops > best.fp32_fma_gflops) best = p;
  }
  char why[160];
  std::snprintf(why, sizeof why,
                "measured under load (other processes used %.0f%% of the CPUs): used for this run only, "
                "not kept",
                best.other_load * 100);
  return {best, why};
}

}  // namespace flotilla::cpu
