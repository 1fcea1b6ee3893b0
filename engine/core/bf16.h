// bfloat16 as the engine's plain C++ code sees it: 16 bits, the top half of an IEEE fp32.
//
// Non-obvious decision: a distinct struct, not uint16_t, so that the backend's typed kernel
// overloads (float or bf16_t storage) resolve by type and a bf16 buffer can never be passed where
// an integer array is expected. It has the layout of CUDA's __nv_bfloat16, so the CUDA backend
// reinterprets the pointers; host code converts with the two functions below (round to nearest
// even, NaN kept quiet).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace flotilla {

struct bf16_t {
  uint16_t bits = 0;
};
static_assert(sizeof(bf16_t) == 2, "bf16_t must be two bytes");

inline bf16_t to_bf16(float f) {
  uint32_t u = 0;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16_t{static_cast<uint16_t>((u >> 16) | 0x40u)};  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16_t{static_cast<uint16_t>(u >> 16)};
}

inline float from_bf16(bf16_t b) {
  const uint32_t u = static_cast<uint32_t>(b.bits) << 16;
  float f = 0;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Storage type of a model's parameters, gradients and activations (statistics stay fp32).
enum class DType : uint8_t { kF32, kBF16 };
inline size_t dtype_bytes(DType t) { return t == DType::kF32 ? 4 : 2; }
inline const char* dtype_name(DType t) { return t == DType::kF32 ? "fp32" : "bf16"; }

}  // namespace flotilla
