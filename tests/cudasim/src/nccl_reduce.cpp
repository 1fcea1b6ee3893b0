// cudasim's NCCL reductions (nccl_reduce.h): typed rank-order folds and the 16-bit float
// conversions, rounding to nearest even as the GPU does.
#include "nccl_reduce.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace cudasim_nccl {
namespace {

// --- 16-bit floats -----------------------------------------------------------------------------
float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

uint16_t float_to_bf16(float f) {  // round to nearest even
  const uint32_t u = float_bits(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(man), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (man << 13));
  return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t float_to_half(float f) {  // round to nearest even
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7e00u);
  const float a = std::fabs(f);
  if (a >= 65520.0f) return static_cast<uint16_t>(sign | 0x7c00u);
  if (a < 6.103515625e-05f)  // below the smallest normal: multiples of 2^-24 (1024 becomes it)
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f)));
  const uint32_t exp = ((u >> 23) & 0xffu) - 112u, man = u & 0x7fffffu;
  uint32_t h = (exp << 10) | (man >> 13);
  const uint32_t rest = man & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

// --- reductions (rank order, bit-reproducible) -------------------------------------------------
template <class T>
T apply(T a, T b, ncclRedOp_t op) {
  if constexpr (std::is_integral_v<T>) {
    // Wrapping arithmetic in an unsigned type at least as wide as unsigned int (no UB).
    using W = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
    switch (op) {
      case ncclProd:
        return static_cast<T>(static_cast<W>(a) * static_cast<W>(b));
      case ncclMax:
        return a > b ? a : b;
      case ncclMin:
        return a < b ? a : b;
      default:
        return static_cast<T>(static_cast<W>(a) + static_cast<W>(b));
    }
  } else {
    switch (op) {
      case ncclProd:
        return a * b;
      case ncclMax:
        return b > a ? b : a;
      case ncclMin:
        return b < a ? b : a;
      default:
        return a + b;
    }
  }
}

// dst[0, len) = op over q of srcs[q][0, len), in rank order.
template <class T>
void reduce_typed(char* dst, const std::vector<const char*>& srcs, size_t len, ncclRedOp_t op) {
  std::vector<T> acc(len);
  std::memcpy(acc.data(), srcs[0], len * sizeof(T));
  for (size_t q = 1; q < srcs.size(); ++q) {
    const T* s = reinterpret_cast<const T*>(srcs[q]);
    for (size_t i = 0; i < len; ++i) acc[i] = apply(acc[i], s[i], op);
  }
  if (op == ncclAvg) {
    const T n = static_cast<T>(srcs.size());
    for (size_t i = 0; i < len; ++i) acc[i] = static_cast<T>(acc[i] / n);
  }
  std::memcpy(dst, acc.data(), len * sizeof(T));
}

void reduce_16(char* dst, const std::vector<const char*>& srcs, size_t len, ncclRedOp_t op, bool bf16) {
  auto to_f = [bf16](uint16_t h) { return bf16 ? bf16_to_float(h) : half_to_float(h); };
  std::vector<float> acc(len);
  std::vector<uint16_t> h(len);
  for (size_t q = 0; q < srcs.size(); ++q) {
    std::memcpy(h.data(), srcs[q], len * 2);
    for (size_t i = 0; i < len; ++i) acc[i] = q == 0 ? to_f(h[i]) : apply(acc[i], to_f(h[i]), op);
  }
  const float n = static_cast<float>(srcs.size());
  for (size_t i = 0; i < len; ++i) {
    const float v = op == ncclAvg ? acc[i] / n : acc[i];
    h[i] = bf16 ? float_to_bf16(v) : float_to_half(v);
  }
  std::memcpy(dst, h.data(), len * 2);
}

}  // namespace

void reduce_into(char* dst, const std::vector<const char*>& srcs, size_t len, ncclDataType_t t,
                 ncclRedOp_t op) {
  switch (t) {
    case ncclInt8:
      return reduce_typed<int8_t>(dst, srcs, len, op);
    case ncclUint8:
      return reduce_typed<uint8_t>(dst, srcs, len, op);
    case ncclInt32:
      return reduce_typed<int32_t>(dst, srcs, len, op);
    case ncclUint32:
      return reduce_typed<uint32_t>(dst, srcs, len, op);
    case ncclInt64:
      return reduce_typed<int64_t>(dst, srcs, len, op);
    case ncclUint64:
      return reduce_typed<uint64_t>(dst, srcs, len, op);
    case ncclFloat32:
      return reduce_typed<float>(dst, srcs, len, op);
    case ncclFloat64:
      return reduce_typed<double>(dst, srcs, len, op);
    case ncclFloat16:
      return reduce_16(dst, srcs, len, op, false);
    case ncclBfloat16:
      return reduce_16(dst, srcs, len, op, true);
    default:
      return;
  }
}

}  // namespace cudasim_nccl
