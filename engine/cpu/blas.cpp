// Run-time loading of OpenBLAS with the engine's core choice (see blas.h for why).
#include "engine/cpu/blas.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include "engine/core/error.h"
#include "engine/cpu/onednn.h"

namespace flotilla::cpu {
namespace {

// cblas_sgemm's C signature with the enums as ints (CblasRowMajor 101, NoTrans 111, Trans 112).
using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float,
                         float*, int);
using SetThreadsFn = void (*)(int);
using GetThreadsFn = int (*)();
using TextFn = char* (*)();

struct Api {
  SgemmFn sgemm = nullptr;
  SetThreadsFn set_threads = nullptr;
  GetThreadsFn get_threads = nullptr;
  BlasInfo info;
};

#ifndef FLOTILLA_OPENBLAS_FILE
#define FLOTILLA_OPENBLAS_FILE "libopenblas.so"
#endif
constexpr const char* kLibraries[] = {"libopenblas.so.0", "libopenblas.so", FLOTILLA_OPENBLAS_FILE};

void* symbol(void* lib, const char* name, const std::string& file) {
  void* p = dlsym(lib, name);
  if (p == nullptr)
    throw Error(ExitCode::kInternal,
                file + " has no symbol " + name + ": install Debian's libopenblas0 (scripts/install-deps)");
  return p;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return s;
}

Api load() {
  Api api;
  BlasInfo& info = api.info;
  KernelPath cap = KernelPath::kAmxBf16;
  const CpuFeatures& f = cpu_features();
  if (const char* env = std::getenv("FLOTILLA_CPU_PATH"); env != nullptr && *env != '\0') {
    if (!parse_kernel_path(env, &cap))
      throw Error(ExitCode::kUsage, std::string("FLOTILLA_CPU_PATH='") + env +
                                        "' is not a kernel path: use sse, avx2, avx512, avx512_bf16 "
                                        "or amx_bf16, or unset it");
    if (static_cast<int>(cap) > static_cast<int>(choose_kernel_path(f).widest))
      throw Error(ExitCode::kUsage, std::string("FLOTILLA_CPU_PATH=") + env + " is wider than this CPU (" +
                                        describe_features(f) + "): its widest path is " +
                                        kernel_path_name(choose_kernel_path(f).widest));
  }
  info.choice = choose_kernel_path(f, cap);
  info.requested_core = info.choice.openblas_core;
  const char* old = std::getenv("OPENBLAS_CORETYPE");
  info.env_coretype = old != nullptr ? old : "";
  void* lib = nullptr;
  for (const char* name : kLibraries) {
    if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD)) != nullptr) {
      info.preloaded = true;  // linked or loaded by someone else: its constructor already ran
      info.library = name;
      break;
    }
  }
  if (lib == nullptr) {
    // setenv/getenv race other threads only if they read the environment at this moment; the
    // first BLAS call comes from the backend's setup, before any worker threads start.
    setenv("OPENBLAS_CORETYPE", info.requested_core.c_str(), 1);
    std::string errors;
    for (const char* name : kLibraries) {
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) {
        info.library = name;
        break;
      }
      errors += std::string(errors.empty() ? "" : "; ") + dlerror();
    }
    if (old != nullptr)
      setenv("OPENBLAS_CORETYPE", info.env_coretype.c_str(), 1);
    else
      unsetenv("OPENBLAS_CORETYPE");
    if (lib == nullptr)
      throw Error(ExitCode::kInternal,
                  "cannot load OpenBLAS (" + errors + "): install libopenblas0 (scripts/install-deps)");
  }
  api.sgemm = reinterpret_cast<SgemmFn>(symbol(lib, "cblas_sgemm", info.library));
  api.set_threads = reinterpret_cast<SetThreadsFn>(symbol(lib, "openblas_set_num_threads", info.library));
  api.get_threads = reinterpret_cast<GetThreadsFn>(symbol(lib, "openblas_get_num_threads", info.library));
  const auto corename = reinterpret_cast<TextFn>(symbol(lib, "openblas_get_corename", info.library));
  const auto config = reinterpret_cast<TextFn>(symbol(lib, "openblas_get_config", info.library));
  if (const char* c = corename()) info.loaded_core = c;
  if (const char* c = config()) info.config = c;
  while (!info.config.empty() && info.config.back() == ' ') info.config.pop_back();
  info.sgemm_path = path_of_openblas_core(info.loaded_core);
  info.sgemm_library = "OpenBLAS sgemm, core " + info.loaded_core;
  const char* want = std::getenv("FLOTILLA_SGEMM");
  const std::string want_lib = want != nullptr ? lower(want) : "";
  if (!want_lib.empty() && want_lib != "openblas" && want_lib != "onednn")
    throw Error(ExitCode::kUsage, "FLOTILLA_SGEMM='" + std::string(want) +
                                      "' is not an sgemm library: use onednn or openblas, or unset it");
  const bool capped = std::getenv("FLOTILLA_CPU_PATH") != nullptr && *std::getenv("FLOTILLA_CPU_PATH") != '\0';
  if (want_lib != "onednn") {
    info.sgemm_choice = want_lib == "openblas" ? "FLOTILLA_SGEMM=openblas" : "the default";
  } else if (capped) {
    throw Error(ExitCode::kUsage, "FLOTILLA_SGEMM=onednn and FLOTILLA_CPU_PATH cannot be combined: "
                                  "the path sets OpenBLAS's core; unset one of them");
  } else if (!onednn_info().loaded) {
    info.sgemm_choice = "oneDNN not loaded: " + onednn_info().error;
    if (want_lib == "onednn")
      throw Error(ExitCode::kUsage, "FLOTILLA_SGEMM=onednn, but " + info.sgemm_choice);
  } else {
    info.onednn_sgemm = true;
    info.sgemm_path = onednn_fp32_path();
    info.sgemm_library = "oneDNN " + onednn_info().version + " sgemm, ISA " + onednn_isa_name();
    info.sgemm_choice = "FLOTILLA_SGEMM=onednn";
  }
  return api;
}

Api& api() {
  static Api a = load();  // C++ guarantees one thread runs this; a throw retries on the next call
  return a;
}

}  // namespace

const BlasInfo& blas_info() { return api().info; }

KernelPath path_of_openblas_core(const std::string& core) {
  const std::string c = lower(core);
  if (c == "skylakex" || c == "cooperlake" || c == "sapphirerapids") return KernelPath::kAvx512;
  if (c == "haswell" || c == "zen") return KernelPath::kAvx2;
  return KernelPath::kSse;
}

void blas_sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                const float* B, int ldb, float beta, float* C, int ldc) {
  if (api().info.onednn_sgemm) {
    onednn_sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  api().sgemm(101, trans_a ? 112 : 111, trans_b ? 112 : 111, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void blas_set_threads(int n) { api().set_threads(n); }
int blas_threads() { return api().get_threads(); }

}  // namespace flotilla::cpu
