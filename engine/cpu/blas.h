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
// Decision: the fp32 sgemm is OpenBLAS's by default; FLOTILLA_SGEMM=onednn runs oneDNN's dnnl_sgemm
// instead (oneDNN is already loaded for CPU bf16, and picks its kernel from cpuid features itself).
// oneDNN's jit kernels ran the model's shapes 5-15% faster, one thread each: on a 2-vCPU Zen 4 (AMD
// EPYC, family 25 model 17) 98-108 GFLOP/s against OpenBLAS 0.3.21 Cooperlake's 85-100 for the
// GPT-2 small linear, LM-head and attention shapes, against a 115 GFLOP/s FMA ceiling; `bench
// --preset small` 79% of the FMA ceiling against 64-71%. It is not the default yet: while it was,
// one rank of one test run (engine_test_launch_signals, under the full suite) aborted with glibc's
// "corrupted size vs. prev_size", not reproduced in 80 reruns nor under valgrind, and never seen
// with OpenBLAS. Both run one call per thread with the same split (matmul.cpp), so determinism is
// the same either way.
#pragma once

#include <string>

#include "engine/cpu/cpu_features.h"

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
  bool onednn_sgemm = false;  // the fp32 sgemm is oneDNN's (FLOTILLA_SGEMM=onednn, see above)
  std::string sgemm_library;  // "oneDNN 2.6.3 sgemm, ISA avx512_core_bf16" or "OpenBLAS sgemm, core Cooperlake"
  std::string sgemm_choice;   // why that library: "the default", "FLOTILLA_SGEMM=onednn", ...
};

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
