// cpuid / xgetbv / arch_prctl reading of the CPU's features, and the pure kernel-path choice.
//
// Decision: the OpenBLAS core for each path is the widest one Debian's OpenBLAS 0.3.21 ships
// (its DYNAMIC_ARCH list ends at Cooperlake: no SapphireRapids, and it is built without bfloat16,
// so it has no sbgemm and AMX does not change its sgemm). Cooperlake is SkylakeX's AVX-512 sgemm
// plus bf16 helpers; it measured faster than SkylakeX on Sapphire Rapids (940 against 862 tokens/s
// in issue 17) and on this Zen 5 (1024^3, one thread: 137 against 106 GFLOP/s), so CPUs with
// AVX512_BF16 get it.
#include "engine/cpu/cpu_features.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <mutex>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace flotilla::cpu {
namespace {

constexpr const char* kPathNames[] = {"sse", "avx2", "avx512", "avx512_bf16", "amx_bf16"};

#if defined(__x86_64__)
struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(unsigned leaf, unsigned sub) {
  Regs r;
  if (!__get_cpuid_count(leaf, sub, &r.a, &r.b, &r.c, &r.d)) r = Regs{};
  return r;
}

unsigned long long xcr0() {
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<unsigned long long>(hi) << 32) | lo;
}

bool bit(unsigned v, int i) { return ((v >> i) & 1u) != 0; }

// Linux >= 5.16: AMX tile data is off until the process asks (ARCH_REQ_XCOMP_PERM, XTILEDATA).
bool request_amx_permission() {
  constexpr int kArchGetXcompPerm = 0x1022, kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
  unsigned long long bits = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &bits) != 0) return false;
  return ((bits >> kXfeatureXtiledata) & 1ull) != 0;
}

CpuFeatures read_features() {
  CpuFeatures f;
  const Regs l0 = cpuid(0, 0);
  char vendor[13] = {0};
  std::memcpy(vendor, &l0.b, 4);
  std::memcpy(vendor + 4, &l0.d, 4);
  std::memcpy(vendor + 8, &l0.c, 4);
  f.vendor = vendor;
  const Regs l1 = cpuid(1, 0);
  const unsigned base_family = (l1.a >> 8) & 0xf, base_model = (l1.a >> 4) & 0xf;
  f.family = static_cast<int>(base_family == 0xf ? base_family + ((l1.a >> 20) & 0xff) : base_family);
  f.model = static_cast<int>(base_family >= 6 ? base_model | (((l1.a >> 16) & 0xf) << 4) : base_model);
  f.fma = bit(l1.c, 12);
  const bool osxsave = bit(l1.c, 27), avx = bit(l1.c, 28);
  if (l0.a >= 7) {
    const Regs l7 = cpuid(7, 0);
    f.avx2 = bit(l7.b, 5);
    f.avx512f = bit(l7.b, 16);
    f.avx512dq = bit(l7.b, 17);
    f.avx512cd = bit(l7.b, 28);
    f.avx512bw = bit(l7.b, 30);
    f.avx512vl = bit(l7.b, 31);
    f.amx_bf16 = bit(l7.d, 22);
    f.amx_tile = bit(l7.d, 24);
    if (l7.a >= 1) f.avx512_bf16 = bit(cpuid(7, 1).a, 5);
  }
  if (osxsave && avx) {
    const unsigned long long x = xcr0();
    f.os_avx = (x & 0x6) == 0x6;                   // SSE + AVX state
    f.os_avx512 = f.os_avx && (x & 0xe0) == 0xe0;  // opmask, ZMM_Hi256, Hi16_ZMM
    f.os_amx = (x & 0x60000) == 0x60000;           // XTILECFG, XTILEDATA
  }
  if (f.amx_tile && f.os_amx) f.amx_permitted = request_amx_permission();
  char brand[49] = {0};
  if (cpuid(0x80000000u, 0).a >= 0x80000004u) {
    for (unsigned i = 0; i < 3; ++i) {
      const Regs r = cpuid(0x80000002u + i, 0);
      std::memcpy(brand + 16 * i, &r.a, 4);
      std::memcpy(brand + 16 * i + 4, &r.b, 4);
      std::memcpy(brand + 16 * i + 8, &r.c, 4);
      std::memcpy(brand + 16 * i + 12, &r.d, 4);
    }
  }
  std::string b = brand;
  const auto first = b.find_first_not_of(' '), last = b.find_last_not_of(' ');
  f.brand = first == std::string::npos ? std::string() : b.substr(first, last - first + 1);
  return f;
}
#else
CpuFeatures read_features() { return CpuFeatures{}; }
#endif

}  // namespace

const char* kernel_path_name(KernelPath p) { return kPathNames[static_cast<int>(p)]; }

bool parse_kernel_path(const std::string& name, KernelPath* out) {
  for (int i = 0; i < 5; ++i)
    if (name == kPathNames[i]) {
      *out = static_cast<KernelPath>(i);
      return true;
    }
  return false;
}

KernelChoice choose_kernel_path(const CpuFeatures& f, KernelPath cap) {
  const bool avx2 = f.os_avx && f.avx2 && f.fma;
  const bool avx512 =
      avx2 && f.os_avx512 && f.avx512f && f.avx512dq && f.avx512cd && f.avx512bw && f.avx512vl;
  const bool avx512_bf16 = avx512 && f.avx512_bf16;
  const bool amx = avx512 && f.amx_tile && f.amx_bf16 && f.os_amx && f.amx_permitted;
  KernelChoice c;
  c.widest = amx           ? KernelPath::kAmxBf16
             : avx512_bf16 ? KernelPath::kAvx512Bf16
             : avx512      ? KernelPath::kAvx512
             : avx2        ? KernelPath::kAvx2
                           : KernelPath::kSse;
  if (static_cast<int>(cap) < static_cast<int>(c.widest)) c.widest = cap;
  const int w = static_cast<int>(c.widest);
  c.fp32 = w >= static_cast<int>(KernelPath::kAvx512) ? KernelPath::kAvx512 : c.widest;
  c.bf16 = w >= static_cast<int>(KernelPath::kAvx512Bf16) ? c.widest : KernelPath::kSse;
  if (w >= static_cast<int>(KernelPath::kAvx512Bf16)) {
    c.openblas_core = "Cooperlake";
    c.blas_path = KernelPath::kAvx512;
  } else if (w == static_cast<int>(KernelPath::kAvx512)) {
    c.openblas_core = "SkylakeX";
    c.blas_path = KernelPath::kAvx512;
  } else if (w == static_cast<int>(KernelPath::kAvx2)) {
    c.openblas_core = "Haswell";
    c.blas_path = KernelPath::kAvx2;
  } else {
    c.openblas_core = "Prescott";
    c.blas_path = KernelPath::kSse;
  }
  return c;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = read_features();
  return f;
}

std::string describe_features(const CpuFeatures& f) {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (on) s += (s.empty() ? "" : " ") + std::string(name);
  };
  add(f.os_avx && f.avx2, "AVX2");
  add(f.os_avx && f.fma, "FMA");
  add(f.os_avx512 && f.avx512f, "AVX512F");
  add(f.os_avx512 && f.avx512bw, "AVX512BW");
  add(f.os_avx512 && f.avx512vl, "AVX512VL");
  add(f.os_avx512 && f.avx512_bf16, "AVX512_BF16");
  add(f.amx_tile && f.os_amx, "AMX-TILE");
  add(f.amx_bf16 && f.os_amx, "AMX-BF16");
  if (f.amx_tile && f.os_amx && !f.amx_permitted) s += " (AMX not permitted by the kernel)";
  return s.empty() ? "SSE only" : s;
}

}  // namespace flotilla::cpu
