// Machine probe: what this host can train with (flotilla-worker probe, the wizard's target page,
// remote node probes). Pure data gathering; formatting lives in cmd_probe.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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

struct ProbeResult {
  std::string hostname;
  std::string os;      // PRETTY_NAME from /etc/os-release
  std::string kernel;  // uname -r
  std::string arch;    // uname -m
  std::string cpu_model;
  int logical_cpus = 0;
  int physical_cores = 0;
  bool avx2 = false, fma = false, avx512f = false, avx512bf16 = false, amx_bf16 = false;
  uint64_t memory_total_bytes = 0;
  uint64_t memory_available_bytes = 0;
  std::vector<GpuInfo> gpus;
  std::string gpu_status;    // "ok" or why there is no GPU ("built without CUDA", "no driver", ...)
  std::string cuda_driver;   // "13.0" or "" when none
  std::string cuda_runtime;  // "" when built without CUDA
  std::string cublas;        // ""
  std::string nccl;          // ""
  std::string gloo;          // "" when not linked
  std::string blas;          // e.g. "OpenBLAS 0.3.21 NO_AFFINITY Haswell MAX_THREADS=64"
  std::string blas_core;     // OpenBLAS kernel in use, e.g. "Haswell"
  std::string worker_version;
  std::string compiler;
};

ProbeResult probe_machine();

// The JSON document of `probe --json` (schema: docs/probe-schema.json, schema_version 1).
std::string probe_to_json(const ProbeResult& p);
std::string probe_to_text(const ProbeResult& p);

}  // namespace flotilla
