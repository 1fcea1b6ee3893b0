// cudasim: the CUDA runtime for host compilers. Flotilla's .cu files (rewritten by cudasim.cmake so
// `k<<<g, b, s, st>>>(args)` becomes `::cudasim::launch(k, "k", g, b, s, st)(args)`) and its host
// code compile against this header with g++, and run on the CPU.
//
// Non-obvious decisions:
// - Device memory is host memory from cudaMalloc with red zones; every call is synchronous, so a
//   stream is a tag and an event is complete once recorded. Races between streams are therefore
//   not found here; everything else (indexing, barriers, shuffles, launch limits, host pointers
//   passed to kernels, writes past an allocation) is checked, and reported as CUDA errors.
// - Each CUDA thread of a block is a fiber with its own stack; __syncthreads and warp shuffles
//   switch fibers, so shared memory (`static thread_local` in the kernel) behaves as on a GPU.
//   CUDASIM_ORDER=reverse runs the threads between two barriers in the opposite order, which makes
//   a missing barrier change the result.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#include <cuda_bf16.h>

// ---- types and enums ------------------------------------------------------------------------------
enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchFailure = 719,
  cudaErrorMisalignedAddress = 716,
  cudaErrorUnknown = 999,
};
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

enum cudaMemoryType {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2,
  cudaMemoryTypeManaged = 3,
};

struct cudaPointerAttributes {
  enum cudaMemoryType type;
  int device;
  void* devicePointer;
  void* hostPointer;
};

enum cudaDataType_t {
  CUDA_R_32F = 0,
  CUDA_R_64F = 1,
  CUDA_R_16F = 2,
  CUDA_R_8I = 3,
  CUDA_R_32I = 10,
  CUDA_R_16BF = 14,
};
typedef enum cudaDataType_t cudaDataType;

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int major;
  int minor;
  int multiProcessorCount;
  int clockRate;
  int memoryClockRate;
  int memoryBusWidth;
};

typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;

#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#define CUDART_VERSION 13000

// ---- runtime functions (tests/cudasim/src/runtime.cpp) ---------------------------------------------
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetPCIBusId(char* bus, int len, int device);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaRuntimeGetVersion(int* v);
cudaError_t cudaDriverGetVersion(int* v);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorName(cudaError_t e);
const char* cudaGetErrorString(cudaError_t e);

cudaError_t cudaMalloc(void** p, size_t bytes);
template <typename T>
inline cudaError_t cudaMalloc(T** p, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
cudaError_t cudaFree(void* p);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s = nullptr);
cudaError_t cudaMemset(void* p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s = nullptr);
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p);

cudaError_t cudaStreamCreate(cudaStream_t* s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);
cudaError_t cudaEventCreate(cudaEvent_t* e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

// ---- device side ------------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __shared__ static thread_local

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}  // NOLINT
};

namespace cudasim {

// The CUDA thread a fiber runs, and the block and grid it belongs to (runtime.cpp / kernel.cpp).
struct ThreadState {
  uint3 tid;
  int lane;
  int warp;
  int shuffle_phase;  // which of the warp's two slot rows its next shuffle writes
};
extern thread_local ThreadState* g_thread;
extern thread_local uint3 g_block_idx;
extern thread_local dim3 g_block_dim;
extern thread_local dim3 g_grid_dim;

void sync_block();                  // __syncthreads
void sync_warp();                   // __syncwarp and the halves of a shuffle
uint64_t* warp_slots(int phase);    // a row of 32 exchange slots of the calling thread's warp
void fail_kernel(const char* why);  // records an error for the running kernel and ends its thread

// Runs `body` once per CUDA thread of every block; returns the launch's error.
using KernelBody = void (*)(void* closure);
cudaError_t run_kernel(const char* name, dim3 grid, dim3 block, KernelBody body, void* closure);
// True when p lies inside a live cudaMalloc allocation (kernels may only take device pointers).
bool is_device_pointer(const void* p);
void set_launch_error(cudaError_t e, const char* name, const char* why);
// Streams (streams.cpp): queue device work on a stream (it runs when something waits for it; the
// null stream runs it at once, after all queued work), and run a stream's or every queued piece.
void enqueue(cudaStream_t stream, std::function<void()> work);
void flush_stream(cudaStream_t stream);
void flush_all();

template <typename T>
inline T shuffle_from(T v, int src_lane_of) {
  static_assert(sizeof(T) <= 8, "cudasim shuffles move at most 8 bytes");
  // Two slot rows used in turn: a lane can only write a row again after every lane has passed the
  // next shuffle's barrier, i.e. has read this one, so one barrier per shuffle is enough.
  uint64_t* slots = warp_slots(g_thread->shuffle_phase);
  g_thread->shuffle_phase ^= 1;
  uint64_t mine = 0;
  std::memcpy(&mine, &v, sizeof(T));
  slots[g_thread->lane] = mine;
  sync_warp();
  const uint64_t got = slots[src_lane_of];
  T r;
  std::memcpy(&r, &got, sizeof(T));
  return r;
}

template <typename... P>
struct Launch {
  void (*kernel)(P...);
  const char* name;
  dim3 grid, block;
  cudaStream_t stream;
  template <typename... A>
  void operator()(A&&... args) const {
    static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong number of arguments");
    std::tuple<std::decay_t<P>...> bound(static_cast<std::decay_t<P>>(std::forward<A>(args))...);
    bool host_ptr = false;
    std::apply([&](const auto&... a) { ((host_ptr = host_ptr || points_to_host(a)), ...); }, bound);
    if (host_ptr) {
      set_launch_error(cudaErrorInvalidDevicePointer, name, "a pointer argument is not device memory");
      return;
    }
    // Queued on the stream with its arguments by value; runs when the stream is drained.
    enqueue(stream, [k = kernel, n = name, g = grid, b = block, bound]() mutable {
      struct Closure {
        void (*k)(P...);
        std::tuple<std::decay_t<P>...>* args;
      } c{k, &bound};
      run_kernel(
          n, g, b,
          [](void* p) {
            auto* cl = static_cast<Closure*>(p);
            std::apply(cl->k, *cl->args);
          },
          &c);
    });
  }
  template <typename V>
  static bool points_to_host(const V& v) {
    if constexpr (std::is_pointer_v<V>)
      return v != nullptr && !is_device_pointer(static_cast<const void*>(v));
    else
      return false;
  }
};

template <typename... P>
Launch<P...> launch(void (*kernel)(P...), const char* name, dim3 grid, dim3 block, size_t /*shared*/ = 0,
                    cudaStream_t stream = nullptr) {
  return Launch<P...>{kernel, name, grid, block, stream};
}

}  // namespace cudasim

#define threadIdx (::cudasim::g_thread->tid)
#define blockIdx (::cudasim::g_block_idx)
#define blockDim (::cudasim::g_block_dim)
#define gridDim (::cudasim::g_grid_dim)
constexpr int warpSize = 32;

inline void __syncthreads() { ::cudasim::sync_block(); }
inline void __syncwarp(unsigned /*mask*/ = 0xffffffffu) { ::cudasim::sync_warp(); }
template <typename T>
inline T __shfl_xor_sync(unsigned /*mask*/, T v, int lane_mask, int width = 32) {
  const int lane = ::cudasim::g_thread->lane;
  const int base = lane & ~(width - 1);
  return ::cudasim::shuffle_from(v, base + ((lane ^ lane_mask) & (width - 1)));
}
template <typename T>
inline T __shfl_down_sync(unsigned /*mask*/, T v, unsigned delta, int width = 32) {
  const int lane = ::cudasim::g_thread->lane;
  const int in_seg = (lane & (width - 1)) + static_cast<int>(delta);
  return ::cudasim::shuffle_from(v, in_seg < width ? lane + static_cast<int>(delta) : lane);
}
template <typename T>
inline T __shfl_sync(unsigned /*mask*/, T v, int src, int width = 32) {
  const int lane = ::cudasim::g_thread->lane;
  return ::cudasim::shuffle_from(v, (lane & ~(width - 1)) + (src & (width - 1)));
}

#define CUDASIM_MINMAX(T)                          \
  inline T min(T a, T b) { return b < a ? b : a; } \
  inline T max(T a, T b) { return a < b ? b : a; }
CUDASIM_MINMAX(int)
CUDASIM_MINMAX(unsigned)
CUDASIM_MINMAX(long)
CUDASIM_MINMAX(unsigned long)
CUDASIM_MINMAX(long long)
CUDASIM_MINMAX(unsigned long long)
CUDASIM_MINMAX(float)
CUDASIM_MINMAX(double)
#undef CUDASIM_MINMAX

using std::isfinite;
using std::isinf;
using std::isnan;
using std::signbit;

inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
template <typename T>
inline T __ldg(const T* p) {
  return *p;
}
