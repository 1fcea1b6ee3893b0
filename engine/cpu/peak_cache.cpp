// cpu-peaks.json reading and writing, and the choice between a kept and a fresh peak.
#include "engine/cpu/peak_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/core/cpu_load.h"

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

CacheFileLock::CacheFileLock(const std::string& cache_path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(fs::path(cache_path).parent_path(), ec);
  fd_ = open((cache_path + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ >= 0 && flock(fd_, LOCK_EX) != 0) {
    close(fd_);
    fd_ = -1;
  }
}

CacheFileLock::~CacheFileLock() {
  if (fd_ >= 0) close(fd_);  // closing the only descriptor releases the flock
}

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

// The key names the CPU by brand and by cpuid family and model (clouds sell different cores as "AMD
// EPYC"), and the measurement method: a peak kept by an older, wrong method is not used (method 2:
// the AVX2/SSE loops stopped spilling registers, which had kept AVX2 ceilings at 2/3 of the truth;
// method 3: each thread's best repetition, readings below their own sgemm refused, highest kept).
std::string peak_cache_key(const std::string& cpu_model, int threads) {
  const CpuFeatures& f = cpu_features();
  return cpu_model + " | family " + std::to_string(f.family) + " model " + std::to_string(f.model) + " | " +
         std::to_string(threads) + " threads | " + kernel_path_name(choose_kernel_path(f).fp32) + " | method 3";
}

namespace {

std::string provisional_key(const std::string& cpu_model, int threads) {
  return "provisional | " + peak_cache_key(cpu_model, threads);
}

std::optional<CpuPeak> parse_entry(const nlohmann::json& j, const std::string& key, const std::string& cpu_model,
                                   int threads) {
  const auto it = j.find(key);
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
    p.contended = it->value("contended", false);
    if (!(p.fp32_fma_gflops > 0)) return std::nullopt;
    return p;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

bool entry_beaten(const nlohmann::json& j, const std::string& key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_object() && it->value("beaten", false);
}

bool write_json(const std::string& path, const nlohmann::json& j) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
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

nlohmann::json entry_json(const CpuPeak& p) {
  nlohmann::json e = {{"fp32_isa", p.fp32_isa},       {"fp32_fma_gflops", p.fp32_fma_gflops},
                      {"bf16_isa", p.bf16_isa},       {"bf16_dot_gflops", p.bf16_dot_gflops},
                      {"other_load", p.other_load},   {"contended", p.contended},
                      {"measured_unix", static_cast<long long>(time(nullptr))}};
  if (p.sgemm_gflops > 0) e["sgemm_gflops"] = p.sgemm_gflops;
  return e;
}

// Other processes' share of the CPUs over a short look: whether a measurement now would be trusted.
bool quiet_now() {
  const LoadWindow w;
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  return w.other_load() <= kQuietLoad;
}

}  // namespace

std::optional<CpuPeak> load_cached_peak(const std::string& path, const std::string& cpu_model, int threads) {
  auto p = parse_entry(read_json(path), peak_cache_key(cpu_model, threads), cpu_model, threads);
  if (!p || !p->trusted()) return std::nullopt;
  return p;
}

std::optional<CpuPeak> load_provisional_peak(const std::string& path, const std::string& cpu_model,
                                             int threads) {
  const auto j = read_json(path);
  const std::string key = provisional_key(cpu_model, threads);
  if (entry_beaten(j, key)) return std::nullopt;
  return parse_entry(j, key, cpu_model, threads);
}

bool store_peak(const std::string& path, const CpuPeak& peak) {
  if (!peak.trusted() || !(peak.fp32_fma_gflops > 0)) return false;
  const CacheFileLock lock(path);
  auto j = read_json(path);
  // A ceiling does not fall on the same CPU: a lower reading is a core shared at the host, which
  // this OS cannot see (peak.h), so each figure kept is the highest trusted reading so far.
  CpuPeak keep = peak;
  if (const auto old = load_cached_peak(path, peak.cpu_model, peak.threads)) {
    keep.fp32_fma_gflops = std::max(keep.fp32_fma_gflops, old->fp32_fma_gflops);
    keep.bf16_dot_gflops = std::max(keep.bf16_dot_gflops, old->bf16_dot_gflops);
    keep.sgemm_gflops = std::max(keep.sgemm_gflops, old->sgemm_gflops);
  }
  nlohmann::json e = entry_json(keep);
  e.erase("contended");
  j[peak_cache_key(peak.cpu_model, peak.threads)] = e;
  j.erase(provisional_key(peak.cpu_model, peak.threads));  // a trusted figure replaces a provisional one
  return write_json(path, j);
}

bool store_provisional_peak(const std::string& path, const CpuPeak& peak) {
  if (!(peak.fp32_fma_gflops > 0)) return false;
  const CacheFileLock lock(path);
  auto j = read_json(path);
  const auto trusted = parse_entry(j, peak_cache_key(peak.cpu_model, peak.threads), peak.cpu_model, peak.threads);
  if (trusted && trusted->trusted() && !entry_beaten(j, peak_cache_key(peak.cpu_model, peak.threads)))
    return false;
  CpuPeak keep = peak;
  const std::string key = provisional_key(peak.cpu_model, peak.threads);
  if (const auto old = parse_entry(j, key, peak.cpu_model, peak.threads); old && !entry_beaten(j, key)) {
    keep.fp32_fma_gflops = std::max(keep.fp32_fma_gflops, old->fp32_fma_gflops);
    keep.bf16_dot_gflops = std::max(keep.bf16_dot_gflops, old->bf16_dot_gflops);
    keep.sgemm_gflops = std::max(keep.sgemm_gflops, old->sgemm_gflops);
  }
  j[key] = entry_json(keep);
  return write_json(path, j);
}

void mark_peak_beaten(const std::string& path, const std::string& cpu_model, int threads) {
  const CacheFileLock lock(path);
  auto j = read_json(path);
  bool marked = false;
  for (const std::string& key : {peak_cache_key(cpu_model, threads), provisional_key(cpu_model, threads)}) {
    const auto it = j.find(key);
    if (it == j.end() || !it->is_object()) continue;
    (*it)["beaten"] = true;
    marked = true;
  }
  if (marked) write_json(path, j);
}

PeakForRun peak_for_run(int threads) {
  const std::string path = peak_cache_path();
  const std::string model = cpu_features().brand;
  const auto j = read_json(path);
  const std::string key = peak_cache_key(model, threads);
  const bool trusted_beaten = entry_beaten(j, key);
  if (auto cached = load_cached_peak(path, model, threads); cached && !trusted_beaten)
    return {*cached, "cache " + path, false};
  std::optional<CpuPeak> provisional = load_provisional_peak(path, model, threads);
  if (provisional && !trusted_beaten && !quiet_now()) {
    char why[300];
    std::snprintf(why, sizeof why,
                  "kept from a measurement under load (other processes used %.0f%% of the CPUs) in %s; measured "
                  "again when this machine is quiet at a start",
                  provisional->other_load * 100, path.c_str());
    return {*provisional, why, false};
  }
  CpuPeak best;
  for (int i = 0; i < kFreshTries; ++i) {
    const CpuPeak p = measure_cpu_peak(threads, kSecondsPerKernel, true);
    if (p.trusted()) {
      const bool kept = store_peak(path, p);
      return {p, kept ? "measured now, kept in " + path : "measured now (could not write " + path + ")", true};
    }
    if (p.fp32_fma_gflops > best.fp32_fma_gflops) best = p;
    if (provisional) break;  // one more loaded reading is enough to compare with the kept one
  }
  // Not trusted: kept as the provisional figure (the highest such reading), used by later starts.
  const bool kept = store_provisional_peak(path, best);
  if (provisional && !trusted_beaten && provisional->fp32_fma_gflops > best.fp32_fma_gflops) {
    best.fp32_fma_gflops = provisional->fp32_fma_gflops;
    best.bf16_dot_gflops = std::max(best.bf16_dot_gflops, provisional->bf16_dot_gflops);
  }
  char why[300];
  if (best.quiet())
    std::snprintf(why, sizeof why,
                  "measured on cores shared at the host (the FMA ceiling read below the sgemm, %.0f GFLOP/s): %s",
                  best.sgemm_gflops, kept ? "kept as provisional until a trusted reading" : "not kept");
  else
    std::snprintf(why, sizeof why, "measured under load (other processes used %.0f%% of the CPUs): %s",
                  best.other_load * 100, kept ? "kept as provisional until a quiet start measures again" : "not kept");
  return {best, why, true};
}

std::string sgemm_choice_key(const std::string& onednn_version, const std::string& openblas_core) {
  const CpuFeatures& f = cpu_features();
  return "sgemm | " + f.brand + " | family " + std::to_string(f.family) + " model " +
         std::to_string(f.model) + " | oneDNN " + onednn_version + " | OpenBLAS " + openblas_core +
         " | method 1";
}

std::string sgemm_cache_path() {
  return (std::filesystem::path(peak_cache_path()).parent_path() / "sgemm-choice.json").string();
}

std::optional<SgemmMeasurement> load_sgemm_measurement(const std::string& path, const std::string& key) {
  const auto j = read_json(path);
  const auto it = j.find(key);
  if (it == j.end() || !it->is_object()) return std::nullopt;
  try {
    SgemmMeasurement m;
    m.onednn_gflops = it->at("onednn_gflops").get<double>();
    m.openblas_gflops = it->at("openblas_gflops").get<double>();
    m.other_load = it->value("other_load", 0.0);
    if (!(m.onednn_gflops > 0) || !(m.openblas_gflops > 0)) return std::nullopt;
    return m;
  } catch (const std::exception&) {
    return std::nullopt;  // a damaged entry is measured again and rewritten
  }
}

bool store_sgemm_measurement(const std::string& path, const std::string& key, const SgemmMeasurement& m) {
  auto j = read_json(path);
  j[key] = {{"onednn_gflops", m.onednn_gflops},
            {"openblas_gflops", m.openblas_gflops},
            {"other_load", m.other_load},
            {"measured_unix", static_cast<long long>(time(nullptr))}};
  return write_json(path, j);
}

}  // namespace flotilla::cpu
