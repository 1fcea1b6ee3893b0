// Which clone of the SIMD kernels this machine runs (for describe() and bench reports).
#include "engine/cpu/simd.h"

namespace flotilla::cpu {

const char* simd_level() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512cd"))
    return "avx512";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2";
#endif
  return "baseline";
}

}  // namespace flotilla::cpu
