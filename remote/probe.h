// What a node offers: OS, CPUs, memory, disk, GPUs, libc, and the link's latency.
//
// Decision: one fixed shell script (no argument from the user ever reaches it) prints tagged
// lines that are parsed here; GPUs come from `nvidia-smi --query-gpu=... --format=csv,noheader,
// nounits`, and a node without nvidia-smi simply has no GPUs (not an error). Once the worker is
// deployed, probe_worker() reads `flotilla-worker probe --json` (docs/probe-schema.json), which
// also knows CUDA and NCCL versions. Blocking: call from a worker thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "remote/session.h"

namespace flotilla::remote {

struct GpuInfo {
  int index = 0;
  std::string name;
  uint64_t memory_total_bytes = 0;
  uint64_t memory_used_bytes = 0;
  double utilization_pct = -1;  // -1: not reported ([N/A])
  double temperature_c = -1;
  double power_w = -1;
  std::string driver;
};

struct NodeProbe {
  std::string os;      // PRETTY_NAME of /etc/os-release
  std::string kernel;  // uname -r
  std::string arch;    // uname -m
  std::string glibc;   // e.g. "2.36" ("" when not glibc)
  int cpus = 0;        // online logical CPUs
  uint64_t memory_total_bytes = 0;
  uint64_t memory_available_bytes = 0;
  uint64_t disk_free_bytes = 0;  // on the file system of the remote home
  std::vector<GpuInfo> gpus;     // empty: no nvidia-smi or no GPU
  std::string gpu_status;        // "ok", or why there are none
  std::string cuda_version;      // from the worker probe, when available
  std::string nccl_version;
};

// Runs the probe script on the node.
NodeProbe probe_node(Session& session);

// Parses the probe script's output (exposed for tests).
NodeProbe parse_probe_output(const std::string& text);

// Parses nvidia-smi CSV (index, name, memory.total, memory.used, utilization.gpu, temperature.gpu,
// power.draw, driver_version; MiB, %, C, W) into GPUs; lines that do not parse are skipped.
std::vector<GpuInfo> parse_nvidia_smi_csv(const std::string& csv);

// `<worker> probe --json` on the node (worker = the deployed path): fills the same struct.
NodeProbe probe_worker(Session& session, const std::string& worker_path);

// Median round trip, in seconds, of `samples` runs of a trivial command (`true`).
double measure_latency(Session& session, int samples = 5);

}  // namespace flotilla::remote
