// LoRA's dropout: elementwise over (row, column) with a grid-stride loop; the mask is the
// host-and-device hash of engine/core/lora_mask.h, so a GPU run drops exactly the elements a CPU run drops.
#include "engine/core/lora_mask.h"
#include "engine/cuda/common.cuh"
#include "engine/cuda/cuda_check.h"
#include "engine/cuda/lora.h"

namespace flotilla::cuda {
namespace {

template <typename T>
__global__ void dropout_kernel(T* out, const T* in, size_t total, int n, uint32_t threshold, float keep_scale,
                               uint64_t key, int ld, int col0) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < total; i += stride) {
    const uint64_t r = i / static_cast<size_t>(n), j = i % static_cast<size_t>(n);
    const uint64_t index = r * static_cast<uint64_t>(ld) + static_cast<uint64_t>(col0) + j;
    out[i] = lora_mask_bits(key, index) >= threshold ? from_f<T>(to_f(in[i]) * keep_scale) : from_f<T>(0.0f);
  }
}

}  // namespace

template <typename T>
void dropout(Context& ctx, T* out, const T* in, long N, int n, float p, uint64_t key, int ld, int col0) {
  const size_t total = static_cast<size_t>(N) * static_cast<size_t>(n);
  if (total == 0) return;
  dropout_kernel<T><<<grid_for(total, 256), 256, 0, ctx.stream()>>>(
      out, in, total, n, lora_dropout_threshold(p), 1.0f / (1.0f - p), key, ld, col0);
  check_launch("dropout");
}

#define FLOTILLA_LORA(T)                                                                \
  template void dropout<T>(Context&, T*, const T*, long, int, float, uint64_t, int, int);
FLOTILLA_LORA(float)
FLOTILLA_LORA(bf16)
#undef FLOTILLA_LORA

}  // namespace flotilla::cuda
