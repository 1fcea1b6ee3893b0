// LoRA dropout masks, bit for bit the same on the CPU and on a GPU (engine/cpu/lora.cpp,
// engine/cuda/lora.cu): element i of one mask is kept when a 32-bit hash of (key, i) is at least
// p * 2^32. The key names one mask: (seed, optimizer step, micro-batch, layer, target), so a mask is
// recomputed in backward instead of stored, and a resumed run draws the masks it would have drawn.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define FLOTILLA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FLOTILLA_HOST_DEVICE inline
#endif

namespace flotilla {

FLOTILLA_HOST_DEVICE uint64_t lora_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The hash of element i of the mask `key` (uniform over 32 bits).
FLOTILLA_HOST_DEVICE uint32_t lora_mask_bits(uint64_t key, uint64_t i) {
  return static_cast<uint32_t>(lora_mix64(key + (i + 1) * 0x9E3779B97F4A7C15ull) >> 32);
}

// Elements whose bits fall below this are dropped: floor(p * 2^32), clamped.
inline uint32_t lora_dropout_threshold(float p) {
  if (!(p > 0.0f)) return 0;
  const double t = static_cast<double>(p) * 4294967296.0;
  return t >= 4294967295.0 ? 4294967295u : static_cast<uint32_t>(t);
}

// The key of one forward's masks: the run's seed, the optimizer step, the stream (the data-parallel
// rank: every rank draws its own masks) and the forward's index within the step. Never 0.
inline uint64_t lora_forward_key(uint64_t seed, int64_t step, int stream, int64_t micro) {
  uint64_t k = lora_mix64(seed ^ 0x6C6F7261ull);
  k = lora_mix64(k ^ static_cast<uint64_t>(step));
  k = lora_mix64(k ^ (static_cast<uint64_t>(stream) << 32) ^ static_cast<uint64_t>(micro));
  return k | 1u;
}

// One target's mask in one layer (its index in the whole model) of that forward.
inline uint64_t lora_mask_key(uint64_t forward_key, int layer, int target) {
  return lora_mix64(forward_key ^ (static_cast<uint64_t>(layer) << 8) ^ static_cast<uint64_t>(target));
}

}  // namespace flotilla
