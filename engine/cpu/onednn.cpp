// Run-time loading of oneDNN and the one primitive the engine uses from it, the bf16 matmul (see
// onednn.h for why and for the one-thread rule). Primitives are cached by shape, each with a
// user-managed scratchpad held per thread, so two threads may run the same primitive at once.
//
// Every call into oneDNN runs with the asynchronous signals blocked on the calling thread
// (SignalsDeferred below): oneDNN's JIT f32 gemm points RSP at a heap buffer while it runs, and a
// signal handled meanwhile has its frame written over the heap (onednn.h, "Signals").
#include "engine/cpu/onednn.h"

#include <dlfcn.h>
#include <omp.h>
#include <pthread.h>
#include <signal.h>

#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "engine/core/error.h"

#if defined(FLOTILLA_HAVE_DNNL_HEADERS)
#include <oneapi/dnnl/dnnl.h>
#endif

namespace flotilla::cpu {

#if !defined(FLOTILLA_HAVE_DNNL_HEADERS)

const OnednnInfo& onednn_info() {
  static const OnednnInfo info{false, "", "", "this worker was built without oneDNN's headers (libdnnl-dev)"};
  return info;
}
void onednn_gemm_bf16(bool, bool, int, int, int, const bf16_t*, int, const bf16_t*, int, float, float*, int) {
  throw_config("bf16 matmul on the CPU needs oneDNN: " + onednn_info().error);
}
std::string onednn_last_impl() { return ""; }
bool onednn_sgemm(bool, bool, int, int, int, float, const float*, int, const float*, int, float, float*, int) {
  return false;
}
std::string onednn_isa_name() { return ""; }
KernelPath onednn_fp32_path() { return KernelPath::kSse; }

#else

namespace {

#define FLOTILLA_DNNL_FUNCTIONS(X)                                                                          \
  X(dnnl_version)                                                                                           \
  X(dnnl_engine_create) X(dnnl_stream_create) X(dnnl_memory_desc_init_by_strides) X(dnnl_matmul_desc_init)  \
      X(dnnl_primitive_attr_create) X(dnnl_primitive_attr_destroy)                                          \
          X(dnnl_primitive_attr_set_scratchpad_mode) X(dnnl_primitive_attr_set_post_ops)                    \
              X(dnnl_post_ops_create) X(dnnl_post_ops_destroy) X(dnnl_post_ops_append_sum)                  \
                  X(dnnl_primitive_desc_create) X(dnnl_primitive_desc_destroy) X(dnnl_primitive_desc_query) \
                      X(dnnl_primitive_desc_query_md) X(dnnl_memory_desc_get_size) X(dnnl_primitive_create) \
                          X(dnnl_memory_create) X(dnnl_memory_destroy) X(dnnl_primitive_execute)            \
                              X(dnnl_stream_wait) X(dnnl_sgemm) X(dnnl_get_effective_cpu_isa)

struct Api {
#define FLOTILLA_DNNL_POINTER(name) decltype(&::name) name = nullptr;
  FLOTILLA_DNNL_FUNCTIONS(FLOTILLA_DNNL_POINTER)
#undef FLOTILLA_DNNL_POINTER
  dnnl_engine_t engine = nullptr;
  OnednnInfo info;
};

constexpr const char* kLibraries[] = {"libdnnl.so.2", "libdnnl.so"};

Api load() {
  Api api;
  void* lib = nullptr;
  std::string errors;
  for (const char* name : kLibraries) {
    if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) {
      api.info.library = name;
      break;
    }
    errors += std::string(errors.empty() ? "" : "; ") + dlerror();
  }
  if (lib == nullptr) {
    api.info.error = "cannot load oneDNN (" + errors + "): install Debian's libdnnl2 (scripts/install-deps)";
    return api;
  }
#define FLOTILLA_DNNL_RESOLVE(name)                                                              \
  api.name = reinterpret_cast<decltype(&::name)>(dlsym(lib, #name));                             \
  if (api.name == nullptr) {                                                                     \
    api.info.error =                                                                             \
        api.info.library + " has no symbol " #name ": install Debian's libdnnl2 (2.6 or newer)"; \
    return api;                                                                                  \
  }
  FLOTILLA_DNNL_FUNCTIONS(FLOTILLA_DNNL_RESOLVE)
#undef FLOTILLA_DNNL_RESOLVE
  const dnnl_version_t* v = api.dnnl_version();
  api.info.version =
      std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
  if (api.dnnl_engine_create(&api.engine, dnnl_cpu, 0) != dnnl_success) {
    api.info.error = "oneDNN " + api.info.version + " could not create its CPU engine";
    return api;
  }
  api.info.loaded = true;
  return api;
}

Api& api() {
  static Api a = load();
  return a;
}

// Blocks every signal but the synchronous ones (a fault inside oneDNN must still kill the process
// at once) on this thread for its lifetime, then restores the mask: a signal sent to the process
// is taken by another thread meanwhile, or stays pending here and is handled on this thread's own
// stack as soon as the call returns (one gemm: milliseconds). Two rt_sigprocmask calls per oneDNN
// call, ~0.5 us against the 0.1-10 ms of a training shape's sgemm.
class SignalsDeferred {
 public:
  SignalsDeferred() {
    sigset_t block;
    sigfillset(&block);
    for (int s : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS}) sigdelset(&block, s);
    pthread_sigmask(SIG_BLOCK, &block, &saved_);
  }
  ~SignalsDeferred() { pthread_sigmask(SIG_SETMASK, &saved_, nullptr); }
  SignalsDeferred(const SignalsDeferred&) = delete;
  SignalsDeferred& operator=(const SignalsDeferred&) = delete;

 private:
  sigset_t saved_;
};

void check(dnnl_status_t s, const char* what) {
  if (s != dnnl_success)
    throw Error(ExitCode::kInternal,
                std::string("oneDNN ") + what + " failed (status " + std::to_string(s) + ")");
}

// One shape's primitive (created once, shared by all threads) and its scratchpad size.
struct Prim {
  dnnl_primitive_t prim = nullptr;
  dnnl_memory_desc_t a, b, c, scratch;
  size_t scratch_bytes = 0;
};
using Key = std::tuple<bool, bool, int, int, int, int, int, int, bool>;
std::mutex g_mutex;
std::map<Key, Prim>& cache() {
  static std::map<Key, Prim> c;  // lives for the process: primitives are small and few (one per shape)
  return c;
}
std::string g_last_impl;

// Runs fn with OpenMP's thread count for this thread set to one: oneDNN sizes its blocking and its
// team from omp_get_max_threads(), and the one-thread rule (onednn.h) is what makes bits depend on
// the shape alone.
template <typename F>
void on_one_thread(F&& fn) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  try {
    fn();
  } catch (...) {
    omp_set_num_threads(saved);
    throw;
  }
  omp_set_num_threads(saved);
}

Prim make_prim(Api& d, bool ta, bool tb, int M, int N, int K, int lda, int ldb, int ldc, bool accumulate) {
  Prim p;
  const dnnl_dims_t a_dims = {M, K}, b_dims = {K, N}, c_dims = {M, N};
  const dnnl_dims_t a_str = {ta ? 1 : lda, ta ? lda : 1}, b_str = {tb ? 1 : ldb, tb ? ldb : 1},
                    c_str = {ldc, 1};
  check(d.dnnl_memory_desc_init_by_strides(&p.a, 2, a_dims, dnnl_bf16, a_str), "memory_desc(A)");
  check(d.dnnl_memory_desc_init_by_strides(&p.b, 2, b_dims, dnnl_bf16, b_str), "memory_desc(B)");
  check(d.dnnl_memory_desc_init_by_strides(&p.c, 2, c_dims, dnnl_f32, c_str), "memory_desc(C)");
  dnnl_matmul_desc_t desc;
  check(d.dnnl_matmul_desc_init(&desc, &p.a, &p.b, nullptr, &p.c), "matmul_desc_init");
  dnnl_primitive_attr_t attr = nullptr;
  check(d.dnnl_primitive_attr_create(&attr), "primitive_attr_create");
  d.dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  dnnl_post_ops_t ops = nullptr;
  if (accumulate) {
    check(d.dnnl_post_ops_create(&ops), "post_ops_create");
    d.dnnl_post_ops_append_sum(ops, 1.0f);
    d.dnnl_primitive_attr_set_post_ops(attr, ops);
  }
  dnnl_primitive_desc_t pd = nullptr;
  const dnnl_status_t s = d.dnnl_primitive_desc_create(&pd, &desc, attr, d.engine, nullptr);
  if (ops != nullptr) d.dnnl_post_ops_destroy(ops);
  d.dnnl_primitive_attr_destroy(attr);
  if (s != dnnl_success)
    throw Error(ExitCode::kInternal, "oneDNN has no bf16 matmul for " + std::to_string(M) + "x" +
                                         std::to_string(N) + "x" + std::to_string(K) + " (status " +
                                         std::to_string(s) + ")");
  const char* impl = nullptr;
  d.dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, static_cast<void*>(&impl));
  if (impl != nullptr) g_last_impl = impl;
  const dnnl_memory_desc_t* sd = d.dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  if (sd != nullptr) {
    p.scratch = *sd;
    p.scratch_bytes = d.dnnl_memory_desc_get_size(sd);
  }
  const dnnl_status_t ps = d.dnnl_primitive_create(&p.prim, pd);
  d.dnnl_primitive_desc_destroy(pd);
  check(ps, "primitive_create");
  return p;
}

}  // namespace

const OnednnInfo& onednn_info() { return api().info; }

std::string onednn_last_impl() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_last_impl;
}

bool onednn_sgemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
                  const float* B, int ldb, float beta, float* C, int ldc) {
  Api& d = api();
  if (!d.info.loaded) return false;
  if (M <= 0 || N <= 0) return true;
  if (K <= 0) {  // oneDNN 2.6 returns at once, leaving C as it was; BLAS's C = beta C (beta 0: zeros)
    for (int i = 0; i < M; ++i) {
      float* c = C + static_cast<size_t>(i) * ldc;
      for (int j = 0; j < N; ++j) c[j] = beta == 0.0f ? 0.0f : beta * c[j];
    }
    return true;
  }
  dnnl_status_t s = dnnl_success;
  const SignalsDeferred deferred;
  on_one_thread([&] {
    s = d.dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  });
  check(s, "sgemm");
  return true;
}

std::string onednn_isa_name() {
  Api& d = api();
  if (!d.info.loaded) return "";
  switch (d.dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

KernelPath onednn_fp32_path() {
  const std::string isa = onednn_isa_name();
  if (isa.rfind("avx512_core", 0) == 0) return KernelPath::kAvx512;
  if (isa.rfind("avx2", 0) == 0) return KernelPath::kAvx2;
  return KernelPath::kSse;
}

void onednn_gemm_bf16(bool trans_a, bool trans_b, int M, int N, int K, const bf16_t* A, int lda,
                      const bf16_t* B, int ldb, float beta, float* C, int ldc) {
  if (M <= 0 || N <= 0) return;
  Api& d = api();
  if (!d.info.loaded) throw_config("bf16 matmul on the CPU needs oneDNN: " + d.info.error);
  const bool accumulate = beta != 0.0f;
  const Key key{trans_a, trans_b, M, N, K, lda, ldb, ldc, accumulate};
  const SignalsDeferred deferred;  // the same kernels' family: no signal frame off the thread's stack
  on_one_thread([&] {
    const Prim* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      auto it = cache().find(key);
      if (it == cache().end())
        it = cache().emplace(key, make_prim(d, trans_a, trans_b, M, N, K, lda, ldb, ldc, accumulate)).first;
      p = &it->second;  // std::map never moves its elements
    }
    thread_local dnnl_stream_t stream = nullptr;
    thread_local std::vector<char> scratch;
    if (stream == nullptr)
      check(d.dnnl_stream_create(&stream, d.engine, dnnl_stream_default_flags), "stream_create");
    if (scratch.size() < p->scratch_bytes) scratch.resize(p->scratch_bytes);
    dnnl_memory_t ma = nullptr, mb = nullptr, mc = nullptr, ms = nullptr;
    check(d.dnnl_memory_create(&ma, &p->a, d.engine, const_cast<bf16_t*>(A)), "memory_create(A)");
    check(d.dnnl_memory_create(&mb, &p->b, d.engine, const_cast<bf16_t*>(B)), "memory_create(B)");
    check(d.dnnl_memory_create(&mc, &p->c, d.engine, C), "memory_create(C)");
    int nargs = 3;
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}, {0, nullptr}};
    if (p->scratch_bytes > 0) {
      check(d.dnnl_memory_create(&ms, &p->scratch, d.engine, scratch.data()), "memory_create(scratchpad)");
      args[nargs++] = {DNNL_ARG_SCRATCHPAD, ms};
    }
    const dnnl_status_t s = d.dnnl_primitive_execute(p->prim, stream, nargs, args);
    d.dnnl_stream_wait(stream);
    for (dnnl_memory_t m : {ma, mb, mc, ms})
      if (m != nullptr) d.dnnl_memory_destroy(m);
    check(s, "matmul execute");
  });
}

#endif

}  // namespace flotilla::cpu
