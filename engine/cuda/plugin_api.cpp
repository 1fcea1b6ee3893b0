// The CUDA plugin's one exported entry point (engine/backend/cuda_plugin.h): the table of what the
// worker asks of CUDA, cuBLAS and NCCL. Non-obvious decision: the machine-probe and device-count code
// that used to sit in engine/core/probe.cpp and engine/launch/gpu_pinning.cpp lives here, so no file
// of the worker outside this plugin calls a CUDA function.
#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>

#include "engine/backend/cuda_plugin.h"
#include "engine/comm/backends.h"
#include "engine/core/probe.h"
#include "engine/cuda/bench_cuda.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/train_model_cuda.h"
#include "flotilla/build_info.h"
#if defined(FLOTILLA_HAVE_NCCL)
#include <nccl.h>
#endif

namespace flotilla::cuda {
namespace {

std::string version_string(int v, int major_div, int minor_div, int minor_mod) {
  std::ostringstream s;
  s << v / major_div << "." << (v / minor_div) % minor_mod;
  return s.str();
}

Backend& process_backend() {
  static CudaBackend backend;  // binds the current device; throws when there is none
  return backend;
}

std::unique_ptr<DeviceModel> train_model(const RunConfig& cfg, const ModelDims& dims,
                                         const OptimizerShard& shard, const ModelParallel& model) {
  return make_cuda_train_model(cfg, dims, shard, model);
}

void probe_gpus(ProbeResult& p) {
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  p.cuda_runtime = version_string(runtime, 1000, 10, 100);
  int cublas_major = 0, cublas_minor = 0, cublas_patch = 0;
  cublasGetProperty(MAJOR_VERSION, &cublas_major);
  cublasGetProperty(MINOR_VERSION, &cublas_minor);
  cublasGetProperty(PATCH_LEVEL, &cublas_patch);
  p.cublas =
      std::to_string(cublas_major) + "." + std::to_string(cublas_minor) + "." + std::to_string(cublas_patch);
#if defined(FLOTILLA_HAVE_NCCL)
  int nv = 0;
  if (ncclGetVersion(&nv) == ncclSuccess) {
    // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
    p.nccl =
        std::to_string(nv / 10000) + "." + std::to_string((nv / 100) % 100) + "." + std::to_string(nv % 100);
  }
#endif
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
}

int visible_gpu_count(std::string* why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (why) *why = std::string("CUDA reports: ") + cudaGetErrorString(err);
    cudaGetLastError();
    return 0;
  }
  if (why) *why = "cudaGetDeviceCount";
  return count;
}

void* device_alloc(size_t bytes) {
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) return nullptr;
  cudaMemset(p, 0, bytes);
  cudaDeviceSynchronize();
  return p;
}

void device_free(void* p) { cudaFree(p); }

void device_copy(void* dst, const void* src, size_t bytes) {
  cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice);
  cudaDeviceSynchronize();
}

cuda_plugin::CudaApi make_table() {
  cuda_plugin::CudaApi t;
  t.worker_version = FLOTILLA_VERSION_STRING;
  t.device_available = &device_available;
  t.backend = &process_backend;
  t.make_train_model = &train_model;
  t.cmd_bench = &cmd_bench_cuda;
  t.probe_gpus = &probe_gpus;
  t.visible_gpu_count = &visible_gpu_count;
#if defined(FLOTILLA_HAVE_NCCL)
  t.nccl_usable = &comm::nccl_usable;
  t.make_nccl_world = &comm::make_nccl_world;
#endif
  t.device_alloc = &device_alloc;
  t.device_free = &device_free;
  t.device_copy = &device_copy;
  return t;
}

}  // namespace
}  // namespace flotilla::cuda

extern "C" __attribute__((visibility("default"))) const flotilla::cuda_plugin::CudaApi*
flotilla_cuda_plugin_api() {
  static const flotilla::cuda_plugin::CudaApi table = flotilla::cuda::make_table();
  return &table;
}
