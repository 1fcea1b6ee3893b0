// CPU features read by the engine itself (cpuid and xgetbv), and the kernel path they select.
//
// Decision: the matmul path is a pure function of the instruction-set features the CPU reports and
// the OS has enabled (XCR0 state bits, and for AMX the Linux arch_prctl permission), never of the
// family/model number a library's table may not know. An unknown CPU with AVX-512 gets the AVX-512
// path; only a CPU without AVX2+FMA gets the SSE one. choose_kernel_path() is pure so tests can feed
// it any feature set; every process on one machine reads the same features and so picks the same
// path (bitwise tests compare losses across processes).
#pragma once

#include <string>

namespace flotilla::cpu {

struct CpuFeatures {
  std::string vendor;  // "GenuineIntel", "AuthenticAMD", ...
  std::string brand;   // cpuid brand string, e.g. "AMD EPYC 9B45"
  int family = 0, model = 0;
  // Instruction sets the CPU reports (cpuid).
  bool avx2 = false, fma = false;
  bool avx512f = false, avx512dq = false, avx512cd = false, avx512bw = false, avx512vl = false;
  bool avx512_bf16 = false;
  bool amx_tile = false, amx_bf16 = false;
  // Register state the OS saves (XCR0 from xgetbv): without it the instructions fault.
  bool os_avx = false, os_avx512 = false, os_amx = false;
  // Linux granted this process the AMX tile data state (arch_prctl ARCH_REQ_XCOMP_PERM).
  bool amx_permitted = false;
};

// The widest kernel family a path stands for, narrowest first.
enum class KernelPath { kSse, kAvx2, kAvx512, kAvx512Bf16, kAmxBf16 };

// "sse", "avx2", "avx512", "avx512_bf16", "amx_bf16".
const char* kernel_path_name(KernelPath p);
// Parses a name above; false when unknown.
bool parse_kernel_path(const std::string& name, KernelPath* out);

// What each dtype can use on a CPU with these features (usable = reported by cpuid AND enabled by
// the OS), and the OpenBLAS core type that runs the fp32 path.
struct KernelChoice {
  KernelPath widest = KernelPath::kSse;     // the widest path the CPU can run (any dtype)
  KernelPath fp32 = KernelPath::kSse;       // the fp32 FMA width: kSse, kAvx2 or kAvx512
  KernelPath bf16 = KernelPath::kSse;       // kAvx512Bf16 / kAmxBf16 when present, else kSse (none)
  const char* openblas_core = "Prescott";   // OPENBLAS_CORETYPE for the fp32 sgemm
  KernelPath blas_path = KernelPath::kSse;  // the path that core's kernels use
};

// Pure: the choice for a feature set, optionally narrowed to `cap` (FLOTILLA_CPU_PATH). A cap wider
// than the CPU does not widen anything.
KernelChoice choose_kernel_path(const CpuFeatures& f, KernelPath cap = KernelPath::kAmxBf16);

// This machine's features, read once (also asks Linux for AMX permission where AMX is reported).
const CpuFeatures& cpu_features();

// "AVX2 FMA AVX512F AVX512BW AVX512VL AVX512_BF16" style list of the usable features.
std::string describe_features(const CpuFeatures& f);

}  // namespace flotilla::cpu
