// cudasim: the host side of the CUDA runtime: devices, memory with red zones, copies, and the
// sticky last error (streams and events: streams.cpp).
//
// Non-obvious decisions:
// - Every allocation carries 64-byte red zones filled with a pattern; they are checked after each
//   kernel, copy and memset, and a damaged one fails that call with cudaErrorIllegalAddress and a
//   message naming the allocation, as compute-sanitizer would.
// - Devices: CUDASIM_DEVICES of them (default 4), each with CUDASIM_MEM_GB of memory (default 16),
//   accounted per process, so cudaMemGetInfo answers what this process has allocated.
// - A copy whose pointers disagree with its kind (a host pointer given as device memory) fails with
//   cudaErrorInvalidValue, which a real GPU would report as an illegal address or worse.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>

#include <cuda_runtime.h>

namespace cudasim {
namespace {

constexpr size_t kRed = 64;
constexpr unsigned char kPattern = 0xA5;

struct Alloc {
  size_t bytes;
  int device;
  char* base;  // what std::aligned_alloc returned
};

struct State {
  std::mutex mu;
  std::map<uintptr_t, Alloc> allocs;  // by the device pointer handed out
  size_t used[64] = {};
};

State& state() {
  static State* s = new State;  // never destroyed: cudaFree may run from static destructors
  return *s;
}

thread_local int g_device = 0;
// Process-wide, as a GPU context's sticky error: deferred work may fail on any host thread.
std::atomic<int> g_last{cudaSuccess};

int device_count() {
  static const int n = [] {
    const char* e = std::getenv("CUDASIM_DEVICES");
    const int v = e != nullptr ? std::atoi(e) : 4;
    return v < 0 ? 0 : v > 64 ? 64 : v;
  }();
  return n;
}

size_t device_memory() {
  static const size_t m = [] {
    const char* e = std::getenv("CUDASIM_MEM_GB");
    const double gb = e != nullptr ? std::atof(e) : 16.0;
    return static_cast<size_t>((gb > 0 ? gb : 16.0) * 1073741824.0);
  }();
  return m;
}

cudaError_t fail(cudaError_t e, const std::string& why) {
  std::fprintf(stderr, "cudasim: %s: %s\n", cudaGetErrorName(e), why.c_str());
  g_last = static_cast<int>(e);
  return e;
}

bool red_zone_ok(const unsigned char* p) {
  for (size_t i = 0; i < kRed; ++i)
    if (p[i] != kPattern) return false;
  return true;
}

// The allocation holding [p, p + bytes), or nullptr.
const Alloc* find(const void* p, size_t bytes, uintptr_t* start) {
  State& s = state();
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = s.allocs.upper_bound(a);
  if (it == s.allocs.begin()) return nullptr;
  --it;
  if (a + bytes > it->first + it->second.bytes) return nullptr;
  if (start) *start = it->first;
  return &it->second;
}

bool is_device_range(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(state().mu);
  return find(p, bytes, nullptr) != nullptr;
}

cudaError_t check_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (bytes == 0) return cudaSuccess;
  const bool dst_dev = is_device_range(dst, bytes), src_dev = is_device_range(src, bytes);
  const bool want_dst = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool want_src = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (kind == cudaMemcpyDefault || kind == cudaMemcpyHostToHost) return cudaSuccess;
  if (want_dst && !dst_dev)
    return fail(cudaErrorInvalidValue,
                "cudaMemcpy: destination is not " + std::to_string(bytes) + " bytes of device memory");
  if (want_src && !src_dev)
    return fail(cudaErrorInvalidValue,
                "cudaMemcpy: source is not " + std::to_string(bytes) + " bytes of device memory");
  if (!want_dst && dst_dev)
    return fail(cudaErrorInvalidValue, "cudaMemcpy: destination is device memory but the kind says host");
  if (!want_src && src_dev)
    return fail(cudaErrorInvalidValue, "cudaMemcpy: source is device memory but the kind says host");
  return cudaSuccess;
}

}  // namespace

cudaError_t take_sticky_error() { return static_cast<cudaError_t>(g_last.exchange(cudaSuccess)); }
cudaError_t record_error(cudaError_t e, const std::string& why) { return fail(e, why); }

bool is_device_pointer(const void* p) {
  std::lock_guard<std::mutex> lock(state().mu);
  return find(p, 0, nullptr) != nullptr;
}

void set_launch_error(cudaError_t e, const char* name, const char* why) {
  fail(e, std::string("kernel ") + name + ": " + why);
}

void check_red_zones(const char* after) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  for (const auto& [addr, a] : s.allocs) {
    const auto* p = reinterpret_cast<const unsigned char*>(addr);
    const bool before = red_zone_ok(p - kRed), past = red_zone_ok(p + a.bytes);
    if (before && past) continue;
    std::string why = std::string(after) + " wrote " + (past ? "before the start" : "past the end") +
                      " of a " + std::to_string(a.bytes) + "-byte allocation";
    fail(cudaErrorIllegalAddress, why);
    std::memset(const_cast<unsigned char*>(p) - kRed, kPattern, kRed);  // report once
    std::memset(const_cast<unsigned char*>(p) + a.bytes, kPattern, kRed);
    return;
  }
}

}  // namespace cudasim

using namespace cudasim;

cudaError_t cudaGetDeviceCount(int* count) {
  *count = device_count();
  if (*count == 0) return fail(cudaErrorNoDevice, "CUDASIM_DEVICES=0");
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= device_count())
    return fail(cudaErrorInvalidDevice, "cudaSetDevice(" + std::to_string(device) + ")");
  g_device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = g_device;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties");
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "cudasim (CPU simulator) %d", device);
  prop->totalGlobalMem = device_memory();
  prop->sharedMemPerBlock = 48u << 10;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 4;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char* bus, int len, int device) {
  std::snprintf(bus, static_cast<size_t>(len), "0000:%02x:00.0", device);
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaGetLastError() { return take_sticky_error(); }
cudaError_t cudaPeekAtLastError() { return static_cast<cudaError_t>(g_last.load()); }

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError:
      return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer:
      return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection:
      return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorIllegalAddress:
      return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
    case cudaErrorMisalignedAddress:
      return "cudaErrorMisalignedAddress";
    default:
      return "cudaErrorUnknown";
  }
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorMemoryAllocation:
      return "out of memory (cudasim)";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument (cudasim)";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected (cudasim)";
    case cudaErrorIllegalAddress:
      return "an illegal memory access was encountered (cudasim)";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure (cudasim)";
    default:
      return "error (cudasim; the reason is on stderr)";
  }
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  *p = nullptr;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.used[g_device] + bytes > device_memory())
    return fail(cudaErrorMemoryAllocation, "cudaMalloc(" + std::to_string(bytes) + ") beyond CUDASIM_MEM_GB");
  const size_t padded = 256 + ((bytes + kRed + 255) / 256) * 256;
  auto* base = static_cast<char*>(std::aligned_alloc(256, padded));
  if (base == nullptr) return fail(cudaErrorMemoryAllocation, "host memory exhausted");
  char* dev = base + 256;
  std::memset(dev - kRed, kPattern, kRed);
  std::memset(dev, 0xCD, bytes);  // uninitialised device memory is not zero
  std::memset(dev + bytes, kPattern, kRed);
  s.allocs[reinterpret_cast<uintptr_t>(dev)] = Alloc{bytes, g_device, base};
  s.used[g_device] += bytes;
  *p = dev;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  flush_all();  // cudaFree synchronises the device
  if (p == nullptr) return cudaSuccess;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  const auto it = s.allocs.find(reinterpret_cast<uintptr_t>(p));
  if (it == s.allocs.end())
    return fail(cudaErrorInvalidDevicePointer, "cudaFree of a pointer cudaMalloc did not return");
  s.used[it->second.device] -= it->second.bytes;
  std::free(it->second.base);
  s.allocs.erase(it);
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  *total_bytes = device_memory();
  *free_bytes = device_memory() - s.used[g_device];
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  return cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
}
// Device-to-device copies are queued like kernels; a copy that touches host memory first runs the
// stream's queued work, then copies at once (pageable host memory: the call returns after the copy).
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  const cudaError_t e = check_copy(dst, src, bytes, kind);
  if (e != cudaSuccess || bytes == 0) return e;
  if (is_device_range(dst, bytes) && is_device_range(src, bytes)) {
    enqueue(stream, [dst, src, bytes] { std::memmove(dst, src, bytes); });
    return cudaSuccess;
  }
  flush_stream(stream);
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) { return cudaMemsetAsync(p, value, bytes, nullptr); }
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream) {
  if (bytes > 0 && !is_device_range(p, bytes))
    return fail(cudaErrorInvalidValue,
                "cudaMemset of " + std::to_string(bytes) + " bytes outside device memory");
  enqueue(stream, [p, value, bytes] { std::memset(p, value, bytes); });
  return cudaSuccess;
}
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  std::memset(a, 0, sizeof *a);
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  uintptr_t start = 0;
  if (const Alloc* al = find(p, 0, &start)) {
    a->type = cudaMemoryTypeDevice;
    a->device = al->device;
    a->devicePointer = const_cast<void*>(p);
  } else {
    a->type = cudaMemoryTypeUnregistered;
    a->hostPointer = const_cast<void*>(p);
  }
  return cudaSuccess;
}
