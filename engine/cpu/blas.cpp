// Run-time loading of OpenBLAS with the engine's core choice (see blas.h for why).
#include "engine/cpu/blas.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <vector>

#include "engine/core/cpu_load.h"
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

double gflops_or(const std::string& text, const char* name) {
  const auto at = text.find(std::string(name) + "=");
  return at == std::string::npos ? 0.0 : std::atof(text.c_str() + at + std::string(name).size() + 1);
}

// This thread's CPU time: time other processes take from the core does not count against either
// library (with wall time, under a loaded ctest -j2, 54 vs 50 GFLOP/s and 29 vs 36 came out either
// way round).
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Both libraries on one thread, each call as an OpenMP thread of a training step makes it: per-thread
// slices of a C = 768 model's forward (NT), input gradient (NN, K = 4C), weight gradient (TN) and a
// wide LM-head-like forward (NT). Best of three interleaved repetitions per shape, on this thread's
// CPU time.
SgemmMeasurement time_sgemm_libraries(const Api& api) {
  SgemmMeasurement m;
  if (const char* t = std::getenv("FLOTILLA_TEST_SGEMM_GFLOPS"); t != nullptr && *t != '\0') {
    m.onednn_gflops = gflops_or(t, "onednn");
    m.openblas_gflops = gflops_or(t, "openblas");
    return m;
  }
  struct Shape {
    bool ta, tb;
    int M, N, K;
  };
  constexpr Shape kShapes[] = {{false, true, 256, 768, 768},
                               {false, false, 128, 768, 3072},
                               {true, false, 768, 768, 256},
                               {false, true, 128, 2048, 768}};
  constexpr int kShapeCount = 4, kReps = 3;
  size_t a_size = 0, b_size = 0, c_size = 0;
  for (const Shape& sh : kShapes) {
    a_size = std::max(a_size, static_cast<size_t>(sh.M) * sh.K);
    b_size = std::max(b_size, static_cast<size_t>(sh.K) * sh.N);
    c_size = std::max(c_size, static_cast<size_t>(sh.M) * sh.N);
  }
  std::vector<float> a(a_size), b(b_size), c(c_size);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i % 13) * 0.01f - 0.06f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 7) * 0.01f - 0.03f;
  api.set_threads(1);
  auto call = [&](bool onednn, const Shape& sh, int M, int N) {
    const int lda = sh.ta ? M : sh.K, ldb = sh.tb ? sh.K : N;
    if (onednn)
      onednn_sgemm(sh.ta, sh.tb, M, N, sh.K, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, c.data(), N);
    else
      api.sgemm(101, sh.ta ? 112 : 111, sh.tb ? 112 : 111, M, N, sh.K, 1.0f, a.data(), lda, b.data(), ldb,
                0.0f, c.data(), N);
  };
  const LoadWindow window;
  for (const Shape& sh : kShapes)  // oneDNN generates its kernels and both libraries warm their caches
    for (bool onednn : {true, false}) call(onednn, sh, 64, 64);
  double best[2][kShapeCount];
  std::fill(&best[0][0], &best[0][0] + 2 * kShapeCount, 1e30);
  for (int rep = 0; rep < kReps; ++rep)
    for (int i = 0; i < kShapeCount; ++i)
      for (int lib = 0; lib < 2; ++lib) {
        const double t0 = thread_cpu_seconds();
        call(lib == 0, kShapes[i], kShapes[i].M, kShapes[i].N);
        best[lib][i] = std::min(best[lib][i], thread_cpu_seconds() - t0);
      }
  double flops = 0, seconds[2] = {0, 0};
  for (int i = 0; i < kShapeCount; ++i) {
    flops += 2.0 * kShapes[i].M * kShapes[i].N * static_cast<double>(kShapes[i].K);
    for (int lib = 0; lib < 2; ++lib) seconds[lib] += best[lib][i];
  }
  m.onednn_gflops = flops / seconds[0] / 1e9;
  m.openblas_gflops = flops / seconds[1] / 1e9;
  m.other_load = window.other_load();
  return m;
}

// The measured default (blas.h): the kept figures, else a measurement kept under an exclusive lock
// (the first of several ranks starting at once measures, the others wait and read its figures).
bool measured_default(const Api& api, BlasInfo* info) {
  const std::string path = sgemm_cache_path();
  const std::string key = sgemm_choice_key(onednn_info().version, info->loaded_core);
  std::optional<SgemmMeasurement> m = load_sgemm_measurement(path, key);
  std::string source = "kept in " + path;
  if (!m) {
    const CacheFileLock lock(path);  // concurrent starts: the first measures, the others read its figures
    m = load_sgemm_measurement(path, key);
    if (!m) {
      m = time_sgemm_libraries(api);
      info->sgemm_measured_now = true;
      if (!lock.held() || !store_sgemm_measurement(path, key, *m)) {
        info->sgemm_choice = describe_sgemm_measurement(*m) +
                             "; OpenBLAS, as the figures cannot be kept in " + path +
                             " (other processes might choose differently)";
        return false;
      }
      source = "measured now, kept in " + path;
    }
  }
  const bool onednn = prefer_onednn_sgemm(*m);
  info->sgemm_choice = describe_sgemm_measurement(*m) + " (one thread; " + source + ")";
  return onednn;
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
  const char* cap_env = std::getenv("FLOTILLA_CPU_PATH");
  const bool capped = cap_env != nullptr && *cap_env != '\0';
  bool use_onednn = false;
  if (want_lib == "openblas") {
    info.sgemm_choice = "FLOTILLA_SGEMM=openblas";
  } else if (want_lib == "onednn") {
    if (capped)
      throw Error(ExitCode::kUsage,
                  "FLOTILLA_SGEMM=onednn and FLOTILLA_CPU_PATH cannot be combined: "
                  "the path sets OpenBLAS's core; unset one of them");
    if (!onednn_info().loaded)
      throw Error(ExitCode::kUsage,
                  "FLOTILLA_SGEMM=onednn, but oneDNN is not loaded: " + onednn_info().error);
    use_onednn = true;
    info.sgemm_choice = "FLOTILLA_SGEMM=onednn";
  } else if (capped) {
    info.sgemm_choice = std::string("FLOTILLA_CPU_PATH=") + cap_env + " sets OpenBLAS's core";
  } else if (!onednn_info().loaded) {
    info.sgemm_choice = "the only one: oneDNN not loaded (" + onednn_info().error + ")";
  } else {
    use_onednn = measured_default(api, &info);
  }
  if (use_onednn) {
    info.onednn_sgemm = true;
    info.sgemm_path = onednn_fp32_path();
    info.sgemm_library = "oneDNN " + onednn_info().version + " sgemm, ISA " + onednn_isa_name();
  }
  return api;
}

Api& api() {
  static Api a = load();  // C++ guarantees one thread runs this; a throw retries on the next call
  return a;
}

}  // namespace

const BlasInfo& blas_info() { return api().info; }

bool prefer_onednn_sgemm(const SgemmMeasurement& m) {
  return m.onednn_gflops > m.openblas_gflops * (1.0 + kSgemmMargin);
}

std::string describe_sgemm_measurement(const SgemmMeasurement& m) {
  char text[200];
  if (prefer_onednn_sgemm(m))
    std::snprintf(text, sizeof text, "measured faster on this CPU: onednn %.0f vs openblas %.0f GFLOP/s",
                  m.onednn_gflops, m.openblas_gflops);
  else if (m.openblas_gflops >= m.onednn_gflops)
    std::snprintf(text, sizeof text, "measured faster on this CPU: openblas %.0f vs onednn %.0f GFLOP/s",
                  m.openblas_gflops, m.onednn_gflops);
  else
    std::snprintf(text, sizeof text,
                  "measured on this CPU: onednn %.0f vs openblas %.0f GFLOP/s, within %.0f%%: openblas",
                  m.onednn_gflops, m.openblas_gflops, kSgemmMargin * 100);
  if (m.other_load > kQuietLoad)
    std::snprintf(text + std::strlen(text), sizeof text - std::strlen(text),
                  ", other processes used %.0f%% of the CPUs", m.other_load * 100);
  return text;
}

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
