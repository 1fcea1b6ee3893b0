// cudasim: the bfloat16 type of cuda_bf16.h for host compilers. Conversions round to nearest even
// (as __float2bfloat16_rn on a GPU); NaN stays NaN. Arithmetic goes through float, which is what
// every Flotilla kernel does explicitly anyway.
#pragma once

#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
  uint16_t __x = 0;
  __nv_bfloat16() = default;
  __nv_bfloat16(float f) : __x(from_float(f)) {}                       // NOLINT: implicit, as CUDA
  __nv_bfloat16(double d) : __x(from_float(static_cast<float>(d))) {}  // NOLINT
  __nv_bfloat16(int i) : __x(from_float(static_cast<float>(i))) {}     // NOLINT
  operator float() const {                                             // NOLINT
    const uint32_t u = static_cast<uint32_t>(__x) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  static uint16_t from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0)
      return static_cast<uint16_t>((u >> 16) | 0x40u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
  }
};
typedef __nv_bfloat16 nv_bfloat16;

inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 b) { return static_cast<float>(b); }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) {
  __nv_bfloat16 b;
  b.__x = u;
  return b;
}
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
