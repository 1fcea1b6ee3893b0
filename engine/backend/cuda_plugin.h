// The CUDA loading seam: everything the worker asks of CUDA, cuBLAS(Lt) and NCCL goes through one
// table of functions that the CUDA plugin (libflotilla-cuda.so, built from engine/cuda/ and
// engine/comm/nccl_*) exports, so the worker binary itself needs no CUDA library to start.
//
// Non-obvious decision: the plugin is a module, not a library the worker links. It is dlopen()ed
// on first use (run.device = "cuda", probe, launch's GPU count, parallel.backend = nccl) from
// <worker dir>/../lib/flotilla/ or <worker dir>/lib/flotilla/ (the package, the bundle and the build
// tree all use one of these), and it resolves the engine's own symbols against the worker, which
// exports them. A binary that links the plugin's objects directly (the gpu tests) gets the same
// table without dlopen. When loading fails, the dlerror() names the first missing library, and the
// message says which package or bundle provides it.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace flotilla {

class Backend;
class DeviceModel;
struct ModelDims;
using ModelDims = ModelDims;  // engine/model/gpt.h
struct ModelParallel;
struct OptimizerShard;
struct ProbeResult;
struct RunConfig;
namespace comm {
class ProcessGroup;
struct Rendezvous;
}  // namespace comm

namespace cuda_plugin {

// Bumped whenever CudaApi changes; the loader refuses a plugin of another version.
inline constexpr int kAbiVersion = 1;
inline constexpr const char* kPluginFile = "libflotilla-cuda.so";
inline constexpr const char* kPluginPathEnv = "FLOTILLA_CUDA_PLUGIN";  // explicit path (tests, odd layouts)

struct CudaApi {
  int abi_version = kAbiVersion;
  const char* worker_version = "";  // the version the plugin was built with (must equal the worker's)
  // Whether a usable CUDA device exists; otherwise *reason says why. Never throws.
  bool (*device_available)(std::string* reason) = nullptr;
  // The process-wide CudaBackend, created on first call; throws flotilla::Error without a device.
  Backend& (*backend)() = nullptr;
  std::unique_ptr<DeviceModel> (*make_train_model)(const RunConfig&, const ModelDims&, const OptimizerShard&,
                                                   const ModelParallel&) = nullptr;
  int (*cmd_bench)(const std::vector<std::string>& args) = nullptr;  // bench --device cuda
  // Fills gpu_status, gpus, cuda_driver, cuda_runtime, cublas, nccl.
  void (*probe_gpus)(ProbeResult& p) = nullptr;
  // cudaGetDeviceCount, or 0 with *why saying what CUDA reported.
  int (*visible_gpu_count)(std::string* why) = nullptr;
  // NCCL; all three null when the plugin was built without NCCL.
  bool (*nccl_usable)() = nullptr;
  std::unique_ptr<comm::ProcessGroup> (*make_nccl_world)(std::shared_ptr<comm::Rendezvous> rv,
                                                         std::chrono::milliseconds timeout) = nullptr;
  // Device buffers for bench-comm: zero-filled, nullptr when cudaMalloc fails; copies synchronise.
  void* (*device_alloc)(size_t bytes) = nullptr;
  void (*device_free)(void* p) = nullptr;
  void (*device_copy)(void* dst, const void* src, size_t bytes) = nullptr;
};

// What probe reports about the plugin and the CUDA libraries it needs.
struct LibraryStatus {
  std::string soname;   // "libcudart.so.13"
  std::string path;     // where the dynamic loader found it; "" when not found
  std::string package;  // who provides it, e.g. "cuda-cudart-13-0 (NVIDIA's CUDA repository)"
};
struct PluginStatus {
  bool built = false;   // this worker was built with a CUDA plugin (FLOTILLA_CUDA AUTO/ON/SIM)
  bool host = false;    // this program can load it (see host())
  bool loaded = false;  // the table is usable
  std::string path;     // the plugin file tried (or loaded); "" when none was found
  std::string error;    // why it is not loaded, with what to install; "" when loaded
  std::vector<LibraryStatus> libraries;  // the CUDA libraries the plugin links, each looked up
};

// Whether this worker was built with a CUDA plugin at all.
bool built();
// Whether this program can load the plugin: it exports the engine's symbols (flotilla-worker) or
// links the plugin's objects. The app and other tools cannot; they ask flotilla-worker (probe).
bool host();
// The table, loading the plugin on first call; nullptr (and *why, when given) when it cannot be
// loaded. Never throws. Thread-safe; the outcome is cached for the life of the process.
const CudaApi* api(std::string* why = nullptr);
// The table, or Error(kConfig) "<what>: <why>" naming the missing file or library and what to install.
const CudaApi& require(const std::string& what);
// The plugin's state and a lookup of each CUDA library, for probe (loads the plugin).
PluginStatus status();

// The plugin's directory candidates for a worker at `exe_path`: <dir>/../lib/flotilla, <dir>/lib/flotilla.
std::vector<std::string> plugin_candidates(const std::string& exe_path);
// The library named first in a dlerror() text ("libcudart.so.13: cannot open shared object file: ...");
// "" when none is named.
std::string missing_library(const std::string& dlerror_text);
// Which package provides `soname` (a CUDA, cuBLAS, NCCL or driver library), as advice text.
std::string package_hint(const std::string& soname);

}  // namespace cuda_plugin
}  // namespace flotilla

// Defined by the plugin's objects (engine/cuda/plugin_api.cpp). Weak: null in a binary that does not
// link them (the worker), which then dlopen()s the plugin and looks the symbol up there.
extern "C" __attribute__((weak)) const flotilla::cuda_plugin::CudaApi* flotilla_cuda_plugin_api();
