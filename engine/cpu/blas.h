// The engine's one handle on OpenBLAS: loaded at run time with the core type the CPU's features
// choose (cpu_features.h), never the one its own model table would pick.
//
// Decision: OpenBLAS reads OPENBLAS_CORETYPE once, in its load-time constructor, and its model table
// (0.3.21) sends CPUs newer than itself to the SSE3 "Prescott" kernel. So the engine does not link
// it: the first BLAS call sets OPENBLAS_CORETYPE to the chosen core, dlopen()s libopenblas.so.0,
// restores the variable (child processes choose for themselves), and reads back the core OpenBLAS
// reports. A user's OPENBLAS_CORETYPE is overridden; FLOTILLA_CPU_PATH=sse|avx2|avx512|avx512_bf16
// narrows the choice (tests run every path; a path wider than the CPU is refused).
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
  // The path the fp32 sgemm actually runs, from loaded_core (e.g. kSse for "Prescott").
  KernelPath sgemm_path = KernelPath::kSse;
};

// Loads OpenBLAS once (thread-safe) and returns what was loaded. Throws Error(kInternal) when
// libopenblas.so.0 cannot be loaded, Error(kUsage) when FLOTILLA_CPU_PATH names an unknown path or
// one wider than the CPU.
const BlasInfo& blas_info();

// The fp32 path an OpenBLAS core name stands for ("Prescott" -> kSse, "Haswell"/"Zen" -> kAvx2,
// "SkylakeX"/"Cooperlake" -> kAvx512); kSse for names it does not know.
KernelPath path_of_openblas_core(const std::string& core);

// cblas_sgemm, row-major, through the loaded library.
void blas_sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                const float* B, int ldb, float beta, float* C, int ldc);
void blas_set_threads(int n);
int blas_threads();

}  // namespace flotilla::cpu
