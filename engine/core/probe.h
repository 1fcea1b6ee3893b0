// Machine probe: what this host can train with (flotilla-worker probe, the wizard's target page,
// remote node probes), and how fast it reaches other hosts (probe --connect HOST:PORT,...: the
// latency matrix between a run's nodes, remote/latency.h).
//
// Decision: latency is the time of a TCP connect (SYN to SYN-ACK, one round trip through the
// kernel), not an ICMP ping: it needs no privilege, measures the path a run's own TCP traffic
// takes, and a refused or filtered port shows up as exactly that. Targets are validated with
// allow-lists here (engine/ cannot see remote/validate.h) before anything is resolved.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/backend/cuda_plugin.h"

namespace flotilla {

struct GpuInfo {
  int index = 0;
  std::string name;
  uint64_t memory_total_bytes = 0;
  uint64_t memory_free_bytes = 0;
  int cc_major = 0;
  int cc_minor = 0;
  int multiprocessors = 0;
  std::string pci_bus_id;
};

// One `--connect` target: a host name, dotted IPv4 or [IPv6] address, and a port.
struct ConnectTarget {
  std::string host;  // as written; IPv6 keeps its brackets
  int port = 0;
  std::string text() const { return host + ":" + std::to_string(port); }
};

// `count` timed TCP connects to one target: min and median over the connects that succeeded.
struct ConnectProbe {
  ConnectTarget target;
  int attempts = 0;
  int answered = 0;    // connects that completed
  double min_ms = -1;  // -1 when none completed
  double median_ms = -1;
  std::string error;  // "" when at least one connect completed; else "refused", "timed out",
                      // "unresolvable: ..." or "unreachable: ..." (the last failure)
};

struct ProbeResult {
  std::string hostname;
  std::string os;      // PRETTY_NAME from /etc/os-release
  std::string kernel;  // uname -r
  std::string arch;    // uname -m
  std::string cpu_model;
  int logical_cpus = 0;
  int physical_cores = 0;
  // Usable features (cpuid and enabled by the OS), read by the engine itself (cpu/cpu_features.h).
  bool avx2 = false, fma = false, avx512f = false, avx512bf16 = false, amx_bf16 = false;
  bool avx512bw = false, avx512vl = false, amx_tile = false, amx_permitted = false;
  std::string kernel_path;  // the widest kernel path: "avx512_bf16", "avx2", ...
  std::string sgemm_path;   // the path the fp32 sgemm runs (from the OpenBLAS core it reports)
  // Physical ceilings (probe measures them unless --no-peak): 0 when not measured / not present.
  int peak_threads = 0;
  double fp32_fma_gflops = 0, bf16_dot_gflops = 0, sgemm_gflops = 0, peak_other_load = 0;
  bool peak_kept = false;       // trusted enough to be kept in the peak cache (cpu/peak_cache.h)
  bool peak_contended = false;  // the FMA ceiling stayed below its own sgemm (cores shared at the host)
  uint64_t memory_total_bytes = 0;
  uint64_t memory_available_bytes = 0;
  std::vector<GpuInfo> gpus;
  std::string gpu_status;    // "ok" or why there is no GPU ("built without CUDA", "no driver", ...)
  std::string cuda_driver;   // "13.0" or "" when none
  std::string cuda_runtime;  // "" when built without CUDA
  std::string cublas;        // ""
  std::string nccl;          // ""
  // The CUDA plugin (engine/backend/cuda_plugin.h): the file tried, why it did not load ("" when
  // loaded), and a lookup of each CUDA library it links.
  std::string cuda_plugin;
  std::string cuda_plugin_error;
  std::vector<cuda_plugin::LibraryStatus> cuda_libraries;
  std::string gloo;       // "" when not linked
  std::string blas;       // e.g. "OpenBLAS 0.3.21 NO_AFFINITY Haswell MAX_THREADS=64"
  std::string blas_core;  // OpenBLAS kernel in use, e.g. "Haswell"
  std::string worker_version;
  std::string compiler;
  std::vector<ConnectProbe> connect;  // probe --connect; empty (and absent from JSON) otherwise
};

inline constexpr int kMaxConnectTargets = 256;
inline constexpr int kMaxConnectCount = 100;

// Parses "HOST:PORT[,HOST:PORT...]" (the value of `option`, named in every message). Throws
// Error(kUsage) for an empty item, a host that is not a DNS name / dotted IPv4 / [IPv6], a port
// outside 1-65535 or not in plain digits, or more than kMaxConnectTargets targets.
std::vector<ConnectTarget> parse_connect_targets(const std::string& list,
                                                 const std::string& option = "--connect");
// "" when `host` is acceptable (the rules above), else why not.
std::string connect_host_problem(const std::string& host);

// Resolves the target once, then times `count` non-blocking connects, each given `timeout_s` and
// closed at once (with a reset: no TIME_WAIT left behind). Never throws for network failures.
ConnectProbe probe_connect(const ConnectTarget& target, int count = 5, double timeout_s = 2.0);

// `measure_peak`: also measures the FMA / bf16 / sgemm ceilings (about 1 s) and keeps them when quiet.
ProbeResult probe_machine(bool measure_peak = false);

// The JSON document of `probe --json` (schema: docs/probe-schema.json, schema_version 1).
std::string probe_to_json(const ProbeResult& p);
std::string probe_to_text(const ProbeResult& p);

}  // namespace flotilla
