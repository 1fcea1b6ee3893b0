// The engine's one handle on OpenBLAS: loaded at run time with the core type the CPU's features
// choose (cpu_features.h), never the one its own model table would pick.
//
// Decision: OpenBLAS reads OPENBLAS_CORETYPE once, in its load-time constructor, and its model table
// (0.3.21) sends CPUs newer than itself to the SSE3 "Prescott" kernel. So the engine does not link
// it: the first BLAS call sets OPENBLAS_CORETYPE to the chosen core, dlopen()s libopenblas.so.0,
// restores the variable (child processes choose for themselves), and reads back the core OpenBLAS
// reports. A user's OPENBLAS_CORETYPE is overridden; FLOTILLA_CPU_PATH=sse|avx2|avx512|avx512_bf16
// narrows the choice (tests run every path; a path wider than the CPU is refused).
//
// Decision (issue 39): the fp32 sgemm is whichever of OpenBLAS's and oneDNN's (dnnl_sgemm; oneDNN
// is already loaded for CPU bf16 and picks its kernel from cpuid features itself) MEASURED faster
// on this CPU: never a library's or our own table of CPU models. The first process on a machine
// times both, one thread each as training runs them, on four per-thread slices of training shapes
// (forward NT, input-gradient NN, weight-gradient TN, a wide LM-head-like NT; ~1.4 GFLOP a library,
// about 0.1-0.2 s), best of three interleaved repetitions, and keeps the figures in the peak cache
// (peak_cache.h, sgemm_choice_key: CPU signature and both library versions) under a lock, so every
// later process of that machine reads the same choice and so runs the same kernels and bits
// (bitwise tests compare losses across processes). oneDNN must be faster by kSgemmMargin (above
// the measurement's noise), else OpenBLAS. Where the figures cannot be kept (an unwritable cache)
// the default is OpenBLAS, so processes never disagree. FLOTILLA_SGEMM=onednn|openblas overrides;
// FLOTILLA_CPU_PATH (which sets OpenBLAS's core) means OpenBLAS. On the 2-vCPU Zen 4 (AMD EPYC,
// family 25 model 17) oneDNN's jit kernels ran GPT-2 small's shapes 5-15% faster (98-108 GFLOP/s
// per thread against OpenBLAS 0.3.21 Cooperlake's 85-100); `bench --preset small` 79% of the FMA
// ceiling against 64-71%. Both run one call per thread with the same split (matmul.cpp), so
// determinism is the same either way.
//
// oneDNN was opt-in until issue 39 because one full-suite run aborted with glibc's "corrupted size
// vs. prev_size" while it was the default: the cause was oneDNN 2.6's JIT gemm running with RSP in
// a heap buffer while a signal (a checkpoint request) was handled; onednn.h, "Signals", says how
// every oneDNN call is now shielded.
#pragma once

#include <string>

#include "engine/cpu/cpu_features.h"
#include "engine/cpu/peak_cache.h"

namespace flotilla::cpu {

struct BlasInfo {
  KernelChoice choice;         // from the features (and FLOTILLA_CPU_PATH)
  std::string requested_core;  // what OPENBLAS_CORETYPE was set to while loading
  std::string loaded_core;     // what OpenBLAS reports it runs (openblas_get_corename)
  std::string config;          // openblas_get_config()
  std::string library;         // the file dlopen()ed
  std::string env_coretype;    // OPENBLAS_CORETYPE found in the environment ("" when unset)
  bool preloaded = false;      // OpenBLAS was already in the process: the core could not be chosen
  // The path the fp32 sgemm actually runs: oneDNN's ISA, else from loaded_core (e.g. kSse for
  // "Prescott").
  KernelPath sgemm_path = KernelPath::kSse;
  bool onednn_sgemm = false;  // the fp32 sgemm is oneDNN's (measured faster, or FLOTILLA_SGEMM=onednn)
  std::string sgemm_library;  // "oneDNN 2.6.3 sgemm, ISA avx512_core_bf16" or "OpenBLAS sgemm, core Cooperlake"
  // Why that library: "measured faster on this CPU: onednn 218 vs openblas 210 GFLOP/s (...)",
  // "FLOTILLA_SGEMM=onednn", "FLOTILLA_CPU_PATH=avx2 sets OpenBLAS's core", ...
  std::string sgemm_choice;
  bool sgemm_measured_now = false;  // this process timed the libraries (start-up cost)
};

// oneDNN's sgemm is chosen when faster than OpenBLAS's by more than this fraction.
inline constexpr double kSgemmMargin = 0.02;
// Pure: whether a measurement picks oneDNN, and the words bench prints for it.
bool prefer_onednn_sgemm(const SgemmMeasurement& m);
// "measured faster on this CPU: onednn 218 vs openblas 210 GFLOP/s" (or "... within 2% of ...").
// The timing itself runs inside blas_info()'s first call; test seam: FLOTILLA_TEST_SGEMM_GFLOPS=
// "onednn=X,openblas=Y" replaces it (the figures are still kept and read back like real ones).
std::string describe_sgemm_measurement(const SgemmMeasurement& m);

// Loads OpenBLAS once (thread-safe) and returns what was loaded. Throws Error(kInternal) when
// libopenblas.so.0 cannot be loaded, Error(kUsage) when FLOTILLA_CPU_PATH names an unknown path or
// one wider than the CPU.
const BlasInfo& blas_info();

// The fp32 path an OpenBLAS core name stands for ("Prescott" -> kSse, "Haswell"/"Zen" -> kAvx2,
// "SkylakeX"/"Cooperlake" -> kAvx512); kSse for names it does not know.
KernelPath path_of_openblas_core(const std::string& core);

// The fp32 sgemm, row-major: oneDNN's or OpenBLAS's cblas_sgemm (BlasInfo says which). With oneDNN
// it runs on the calling thread whatever blas_set_threads says.
void blas_sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                const float* B, int ldb, float beta, float* C, int ldc);
void blas_set_threads(int n);
int blas_threads();

}  // namespace flotilla::cpu
