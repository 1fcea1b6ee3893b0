// The simulator's own checks must be able to fail: each fault a GPU would punish (or hide) is
// injected here and must come back as the CUDA error a kernel author would see.
//   - a correct block reduction with shared memory, __syncthreads and warp shuffles gives the
//     exact sum (and the same in CUDASIM_ORDER=reverse, run by ctest as a second test);
//   - a kernel that skips the barrier between writing and reading shared memory gives a result
//     that depends on the thread order (the race the reverse order exposes);
//   - half a warp at __syncthreads, the other half at a shuffle: cudaErrorLaunchFailure, not a hang;
//   - a shuffle after half the warp returned: cudaErrorLaunchFailure;
//   - a write one element past a cudaMalloc buffer: cudaErrorIllegalAddress;
//   - a host pointer as a kernel argument: cudaErrorInvalidDevicePointer, the kernel not run;
//   - 2048 threads per block: cudaErrorInvalidConfiguration;
//   - cudaMemcpy with the kind backwards, and more than CUDASIM_MEM_GB: errors, nothing copied;
//   - streams: a stream that reads what another stream writes, without cudaStreamWaitEvent, reads
//     the old value (the producer's work is still queued); with the wait it reads the value
//     written before the event, not the one written after it; an error inside queued work is
//     returned by the next synchronisation.
#include <cuda_runtime.h>

#include <cstdlib>
#include <vector>

#include "check.h"

namespace {

__global__ void block_sum_kernel(float* out, const float* in, int n) {
  __shared__ float warp_sums[32];
  float v = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) v += in[i];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31u) == 0) warp_sums[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.0f;
    for (unsigned w = 0; w < blockDim.x / 32; ++w) s += warp_sums[w];
    out[blockIdx.x] = s;
  }
}

// Thread t writes slot t, then (without a barrier) reads slot t+1 of its neighbour.
__global__ void missing_barrier_kernel(int* out) {
  __shared__ int slot[64];
  const unsigned t = threadIdx.x;
  slot[t] = static_cast<int>(t) + 1;
  out[t] = slot[(t + 1) % 64];
}

// Within one warp, half the lanes wait at __syncthreads and half at a full-mask shuffle.
__global__ void divergent_barrier_kernel(int* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
  }
}

__global__ void partial_warp_shuffle_kernel(int* out) {
  if (threadIdx.x >= 16) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, static_cast<int>(threadIdx.x), 1);
}

__global__ void past_the_end_kernel(float* out, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i <= n) out[i] = 1.0f;  // the bug: <= instead of <
}

__global__ void fill_kernel(float* out, float v) { out[threadIdx.x] = v; }

// Stream `consumer` copies x to y after `producer` filled x with 1 (and, after `event`, with 2).
// Returns y[0] once only the consumer has been synchronised.
float copy_across_streams(float* x, float* y, bool wait) {
  cudaStream_t producer = nullptr, consumer = nullptr;
  cudaEvent_t event = nullptr;
  CHECK(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking) == cudaSuccess);
  CHECK(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking) == cudaSuccess);
  CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming) == cudaSuccess);
  fill_kernel<<<1, 32, 0, producer>>>(x, 1.0f);
  CHECK(cudaEventRecord(event, producer) == cudaSuccess);
  fill_kernel<<<1, 32, 0, producer>>>(x, 2.0f);
  if (wait) CHECK(cudaStreamWaitEvent(consumer, event, 0) == cudaSuccess);
  CHECK(cudaMemcpyAsync(y, x, 32 * sizeof(float), cudaMemcpyDeviceToDevice, consumer) == cudaSuccess);
  CHECK(cudaStreamSynchronize(consumer) == cudaSuccess);
  float got = -1.0f;
  CHECK(cudaMemcpyAsync(&got, y, sizeof got, cudaMemcpyDeviceToHost, consumer) == cudaSuccess);
  CHECK(cudaStreamSynchronize(producer) == cudaSuccess);
  CHECK(cudaEventDestroy(event) == cudaSuccess && cudaStreamDestroy(producer) == cudaSuccess &&
        cudaStreamDestroy(consumer) == cudaSuccess);
  return got;
}

}  // namespace

int main() {
  const bool reverse = std::getenv("CUDASIM_ORDER") != nullptr;
  const int n = 1000;
  std::vector<float> host(n);
  for (int i = 0; i < n; ++i) host[static_cast<size_t>(i)] = static_cast<float>(i % 17);
  float *in = nullptr, *out = nullptr;
  CHECK(cudaMalloc(&in, n * sizeof(float)) == cudaSuccess &&
        cudaMalloc(&out, 1024 * sizeof(float)) == cudaSuccess);
  CHECK(cudaMemcpy(in, host.data(), n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);

  block_sum_kernel<<<2, 256>>>(out, in, n);
  CHECK(cudaGetLastError() == cudaSuccess);
  float sums[2] = {0, 0};
  CHECK(cudaMemcpy(sums, out, sizeof sums, cudaMemcpyDeviceToHost) == cudaSuccess);
  double want = 0;
  for (float x : host) want += x;
  CHECK_MSG(sums[0] == static_cast<float>(want) && sums[1] == sums[0], "block sum %g %g, want %g",
            static_cast<double>(sums[0]), static_cast<double>(sums[1]), want);

  int* iout = nullptr;
  CHECK(cudaMalloc(&iout, 64 * sizeof(int)) == cudaSuccess);
  missing_barrier_kernel<<<1, 64>>>(iout);
  CHECK(cudaGetLastError() == cudaSuccess);
  std::vector<int> seen(64);
  CHECK(cudaMemcpy(seen.data(), iout, 64 * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess);
  // Forward order: thread t reads slot t+1 before thread t+1 wrote it (the leftover of a previous
  // run or garbage); reverse order: t+1 already wrote it. Either way thread 62 differs by order.
  if (reverse)
    CHECK_MSG(seen[62] == 64, "reverse order: thread 62 read %d, want 64 (written first)", seen[62]);
  else
    CHECK_MSG(seen[62] != 64, "forward order: thread 62 read its neighbour's value before it was written");

  divergent_barrier_kernel<<<1, 64>>>(iout);
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  partial_warp_shuffle_kernel<<<1, 32>>>(iout);
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);

  float* small = nullptr;
  CHECK(cudaMalloc(&small, 100 * sizeof(float)) == cudaSuccess);
  past_the_end_kernel<<<1, 128>>>(small, 100);
  CHECK(cudaGetLastError() == cudaErrorIllegalAddress);

  float on_host[32] = {};
  fill_kernel<<<1, 32>>>(on_host, 2.0f);
  CHECK(cudaGetLastError() == cudaErrorInvalidDevicePointer);
  CHECK(on_host[0] == 0.0f);
  fill_kernel<<<1, 2048>>>(out, 2.0f);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);

  // Streams run their work when something waits for it (streams.cpp), so a missing wait shows.
  float *x = nullptr, *y = nullptr;
  CHECK(cudaMalloc(&x, 32 * sizeof(float)) == cudaSuccess &&
        cudaMalloc(&y, 32 * sizeof(float)) == cudaSuccess);
  CHECK(cudaMemset(x, 0, 32 * sizeof(float)) == cudaSuccess &&
        cudaMemset(y, 0, 32 * sizeof(float)) == cudaSuccess);
  const float unordered = copy_across_streams(x, y, false);
  CHECK_MSG(unordered == 0.0f, "without cudaStreamWaitEvent the consumer read %g, want the old 0",
            static_cast<double>(unordered));
  const float ordered = copy_across_streams(x, y, true);
  CHECK_MSG(ordered == 1.0f,
            "with cudaStreamWaitEvent the consumer read %g, want 1 (written before the event)",
            static_cast<double>(ordered));
  cudaStream_t s = nullptr;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  past_the_end_kernel<<<1, 128, 0, s>>>(small, 100);
  CHECK(cudaGetLastError() == cudaSuccess);  // queued, not run yet
  CHECK(cudaStreamSynchronize(s) == cudaErrorIllegalAddress);
  CHECK(cudaStreamDestroy(s) == cudaSuccess && cudaFree(x) == cudaSuccess && cudaFree(y) == cudaSuccess);

  CHECK(cudaMemcpy(host.data(), in, 8, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(host[1] == 1.0f);
  void* huge = nullptr;
  CHECK(cudaMalloc(&huge, size_t{1} << 50) == cudaErrorMemoryAllocation && huge == nullptr);
  size_t free_b = 0, total_b = 0;
  CHECK(cudaMemGetInfo(&free_b, &total_b) == cudaSuccess &&
        total_b - free_b == 1000 * 4 + 1024 * 4 + 64 * 4 + 400);
  CHECK(cudaFree(in) == cudaSuccess && cudaFree(out) == cudaSuccess && cudaFree(iout) == cudaSuccess &&
        cudaFree(small) == cudaSuccess);
  CHECK(cudaFree(in) == cudaErrorInvalidDevicePointer);
  return flotilla_test::summary(reverse ? "cudasim (reverse order)" : "cudasim");
}
