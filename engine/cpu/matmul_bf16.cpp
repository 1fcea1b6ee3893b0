// bf16 linear layers: round the operands into scratch (the weights once per step while a
// Bf16FixedWeights scope is open), then oneDNN per output slice (see matmul_bf16.h for the scheme
// and onednn.h for the library choice).
#include "engine/cpu/matmul_bf16.h"

#include <immintrin.h>

#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "engine/core/error.h"
#include "engine/cpu/blas.h"
#include "engine/cpu/gemm_bf16_avx512.h"
#include "engine/cpu/gemm_split.h"
#include "engine/cpu/onednn.h"
#include "engine/cpu/peak_cache.h"

namespace flotilla::cpu {
namespace {

__attribute__((target("avx512f,avx512bf16,avx512vl"))) void round_avx512_bf16(bf16_t* out, const float* in,
                                                                              size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(in + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), reinterpret_cast<const __m256i&>(h));
  }
  for (; i < n; ++i) out[i] = to_bf16(in[i]);
}

void round_scalar(bf16_t* out, const float* in, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = to_bf16(in[i]);
}

// The rounded operands of the call in progress, kept between calls (they only grow).
struct Scratch {
  std::vector<bf16_t> inp, weight, dout;
};
Scratch& scratch() {
  static Scratch s;
  return s;
}
const bf16_t* rounded(std::vector<bf16_t>& buf, const float* x, size_t n) {
  if (buf.size() < n) buf.resize(n);
  round_to_bf16(buf.data(), x, n);
  return buf.data();
}

// Bf16FixedWeights' copies: one per weight pointer, valid while its generation is the open scope's.
struct WeightCache {
  struct Entry {
    std::vector<bf16_t> copy;
    size_t n = 0;      // elements rounded into copy
    uint64_t gen = 0;  // the scope that rounded them
  };
  bool open = false;
  uint64_t gen = 0;
  std::vector<std::pair<const float*, size_t>> ranges;
  std::unordered_map<const float*, Entry> entries;

  bool fixed(const float* w, size_t n) const {
    const auto a = reinterpret_cast<uintptr_t>(w);
    for (const auto& [p, len] : ranges) {
      const auto b = reinterpret_cast<uintptr_t>(p);
      if (a >= b && a + n * sizeof(float) <= b + len * sizeof(float)) return true;
    }
    return false;
  }
};
WeightCache& weight_cache() {
  static WeightCache c;
  return c;
}

// The bf16 copy of weight w (n elements): the scope's cached one when w is fixed, else rounded now
// into the scratch buffer.
const bf16_t* rounded_weight(std::vector<bf16_t>& scratch_buf, const float* w, size_t n) {
  WeightCache& c = weight_cache();
  if (!c.open || !c.fixed(w, n)) return rounded(scratch_buf, w, n);
  WeightCache::Entry& e = c.entries[w];
  if (e.gen != c.gen || e.n < n) {
    if (e.copy.size() < n) e.copy.resize(n);
    round_to_bf16(e.copy.data(), w, n);
    e.n = n, e.gen = c.gen;
  }
  return e.copy.data();
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

bool hand_kernel_usable() {
  const CpuFeatures& f = cpu_features();
  return f.avx512_bf16 && f.os_avx512;
}

int gemm_case(bool ta, bool tb) {
  if (!ta) return tb ? kBf16Forward : kBf16InputGrad;
  return tb ? -1 : kBf16WeightGrad;
}

// One thread, both kernels on case c's per-thread shape: SgemmMeasurement's two fields reused as
// (oneDNN, hand kernel), best of three interleaved repetitions on this thread's CPU time.
SgemmMeasurement time_bf16_gemms(int c) {
  struct Shape {
    bool ta, tb;
    int M, N, K;
  };
  // Per-thread slices of a C = 576, F = 1536 layer over B*T = 1024 rows (smollm2-135m, 4 x 256).
  constexpr Shape kShapes[kBf16GemmCases] = {
      {false, true, 256, 1536, 576}, {false, false, 256, 576, 1536}, {true, false, 576, 576, 1024}};
  const Shape& sh = kShapes[c];
  std::vector<bf16_t> a(static_cast<size_t>(sh.M) * sh.K), b(static_cast<size_t>(sh.K) * sh.N);
  std::vector<float> out(static_cast<size_t>(sh.M) * sh.N);
  for (size_t i = 0; i < a.size(); ++i) a[i] = to_bf16(static_cast<float>(i % 13) * 0.01f - 0.06f);
  for (size_t i = 0; i < b.size(); ++i) b[i] = to_bf16(static_cast<float>(i % 7) * 0.01f - 0.03f);
  const int lda = sh.ta ? sh.M : sh.K, ldb = sh.tb ? sh.K : sh.N;
  auto call = [&](bool hand) {
    if (hand)
      gemm_bf16_avx512(sh.ta, sh.tb, sh.M, sh.N, sh.K, a.data(), lda, b.data(), ldb, 0.0f, out.data(), sh.N);
    else
      onednn_gemm_bf16(sh.ta, sh.tb, sh.M, sh.N, sh.K, a.data(), lda, b.data(), ldb, 0.0f, out.data(), sh.N);
  };
  call(false), call(true);  // oneDNN generates its kernel; both warm their caches
  double best[2] = {1e30, 1e30};
  for (int rep = 0; rep < 3; ++rep)
    for (int hand = 0; hand < 2; ++hand) {
      const double t0 = thread_cpu_seconds();
      call(hand == 1);
      best[hand] = std::min(best[hand], thread_cpu_seconds() - t0);
    }
  const double flops = 2.0 * sh.M * sh.N * static_cast<double>(sh.K);
  SgemmMeasurement m;
  m.onednn_gflops = flops / best[0] / 1e9;
  m.openblas_gflops = flops / best[1] / 1e9;  // the hand kernel's
  return m;
}

Bf16GemmChoice make_bf16_gemm_choice() {
  Bf16GemmChoice ch;
  if (const char* env = std::getenv("FLOTILLA_BF16_GEMM"); env != nullptr && *env != '\0') {
    const std::string v = env;
    if (v != "onednn" && v != "avx512")
      throw Error(ExitCode::kUsage,
                  "FLOTILLA_BF16_GEMM='" + v + "' is not a bf16 GEMM: use onednn or avx512");
    if (v == "avx512" && !hand_kernel_usable())
      throw Error(ExitCode::kUsage, "FLOTILLA_BF16_GEMM=avx512 needs AVX512_BF16, which this CPU lacks");
    for (bool& h : ch.hand) h = v == "avx512";
    ch.source = "FLOTILLA_BF16_GEMM=" + v;
    return ch;
  }
  if (!hand_kernel_usable() || !onednn_info().loaded) {
    ch.source = "oneDNN (no AVX512_BF16 for the hand kernel)";
    return ch;
  }
  const std::string path = sgemm_cache_path();
  std::string source = "kept in " + path;
  for (int c = 0; c < kBf16GemmCases; ++c) {
    const std::string key = bf16_gemm_choice_key(c);
    std::optional<SgemmMeasurement> m = load_sgemm_measurement(path, key);
    if (!m) {
      const CacheFileLock lock(path);  // concurrent starts: the first measures, the others read
      m = load_sgemm_measurement(path, key);
      if (!m) {
        m = time_bf16_gemms(c);
        if (!lock.held() || !store_sgemm_measurement(path, key, *m)) {
          ch.source =
              "oneDNN, as the figures cannot be kept in " + path + " (ranks might choose differently)";
          ch.onednn_gflops[c] = m->onednn_gflops, ch.hand_gflops[c] = m->openblas_gflops;
          for (bool& h : ch.hand) h = false;
          return ch;
        }
        source = "measured now, kept in " + path;
      }
    }
    ch.onednn_gflops[c] = m->onednn_gflops, ch.hand_gflops[c] = m->openblas_gflops;
    ch.hand[c] = m->openblas_gflops > 1.02 * m->onednn_gflops;
  }
  ch.source = source;
  return ch;
}

// One output slice of a bf16 product on the kernel chosen for its transpose case.
void slice_gemm(bool ta, bool tb, int M, int N, int K, const bf16_t* A, int lda, const bf16_t* B, int ldb,
                float beta, float* C, int ldc) {
  const int c = gemm_case(ta, tb);
  if (c >= 0 && bf16_gemm_choice().hand[c])
    gemm_bf16_avx512(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
  else
    onednn_gemm_bf16(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace

const char* bf16_gemm_case_name(int c) {
  static const char* const kNames[kBf16GemmCases] = {"forward (NT)", "input grad (NN)", "weight grad (TN)"};
  return c >= 0 && c < kBf16GemmCases ? kNames[c] : "?";
}

std::string bf16_gemm_choice_key(int c) {
  const CpuFeatures& f = cpu_features();
  return "bf16-gemm | " + f.brand + " | family " + std::to_string(f.family) + " model " +
         std::to_string(f.model) + " | oneDNN " + onednn_info().version + " | " + bf16_gemm_case_name(c) +
         " | kernel 2";  // bumped when gemm_bf16_avx512 changes: older figures are not used
}

const Bf16GemmChoice& bf16_gemm_choice() {
  static std::once_flag once;
  static Bf16GemmChoice choice;
  std::call_once(once, [] { choice = make_bf16_gemm_choice(); });
  return choice;
}

Bf16FixedWeights::Bf16FixedWeights(std::vector<std::pair<const float*, size_t>> ranges) {
  WeightCache& c = weight_cache();
  if (c.open) throw std::logic_error("Bf16FixedWeights: a scope is already open");
  c.open = true;
  ++c.gen;
  c.ranges = std::move(ranges);
}

void Bf16FixedWeights::end() {
  if (!open_) return;
  open_ = false;
  WeightCache& c = weight_cache();
  // Copies this scope did not use belong to weights no longer trained here: free them.
  for (auto it = c.entries.begin(); it != c.entries.end();)
    it = it->second.gen == c.gen ? std::next(it) : c.entries.erase(it);
  c.open = false;
  ++c.gen;  // every copy is stale from here: the parameters may change
  c.ranges.clear();
}

size_t bf16_weight_cache_bytes() {
  size_t bytes = 0;
  for (const auto& [w, e] : weight_cache().entries) bytes += e.copy.capacity() * sizeof(bf16_t);
  return bytes;
}

void round_to_bf16(bf16_t* out, const float* in, size_t n) {
  static const bool native = cpu_features().avx512_bf16 && cpu_features().os_avx512;
  constexpr size_t kBlock = 1 << 16;
  const long blocks = static_cast<long>((n + kBlock - 1) / kBlock);
#pragma omp parallel for schedule(static)
  for (long b = 0; b < blocks; ++b) {
    const size_t i0 = static_cast<size_t>(b) * kBlock, len = i0 + kBlock < n ? kBlock : n - i0;
    if (native)
      round_avx512_bf16(out + i0, in + i0, len);
    else
      round_scalar(out + i0, in + i0, len);
  }
}

void gemm_bf16(bool trans_a, bool trans_b, int M, int N, int K, const bf16_t* A, int lda, const bf16_t* B,
               int ldb, float beta, float* C, int ldc) {
  bf16_gemm_choice();  // measured (once) on this thread, before the parallel region
  for_each_gemm_slice(M, N, [&](const GemmSlice& s) {
    if (s.m1 <= s.m0 || s.n1 <= s.n0) return;
    const bf16_t* a = trans_a ? A + s.m0 : A + static_cast<size_t>(s.m0) * lda;
    const bf16_t* b = trans_b ? B + static_cast<size_t>(s.n0) * ldb : B + s.n0;
    float* c = C + static_cast<size_t>(s.m0) * ldc + s.n0;
    slice_gemm(trans_a, trans_b, s.m1 - s.m0, s.n1 - s.n0, K, a, lda, b, ldb, beta, c, ldc);
  });
}

void matmul_forward_bf16(float* out, const float* inp, const float* weight, const float* bias, int N, int IC,
                         int OC) {
  Scratch& sc = scratch();
  const bf16_t* x = rounded(sc.inp, inp, static_cast<size_t>(N) * IC);                // (N, IC)
  const bf16_t* w = rounded_weight(sc.weight, weight, static_cast<size_t>(OC) * IC);  // (OC, IC)
  bf16_gemm_choice();
  for_each_gemm_slice(N, OC, [&](const GemmSlice& s) {
    if (s.m1 <= s.m0 || s.n1 <= s.n0) return;
    slice_gemm(false, true, s.m1 - s.m0, s.n1 - s.n0, IC, x + static_cast<size_t>(s.m0) * IC, IC,
               w + static_cast<size_t>(s.n0) * IC, IC, 0.0f, out + static_cast<size_t>(s.m0) * OC + s.n0, OC);
    if (bias != nullptr) add_bias(out, bias, s, OC);
  });
}

void matmul_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, int N, int IC, int OC) {
  Scratch& sc = scratch();
  const bf16_t* d = rounded(sc.dout, dout, static_cast<size_t>(N) * OC);  // (N, OC)
  if (dinp != nullptr) {
    const bf16_t* w = rounded_weight(sc.weight, weight, static_cast<size_t>(OC) * IC);  // (OC, IC)
    gemm_bf16(false, false, N, IC, OC, d, OC, w, IC, 0.0f, dinp, IC);
  }
  if (dweight != nullptr) {
    const bf16_t* x = rounded(sc.inp, inp, static_cast<size_t>(N) * IC);  // (N, IC)
    gemm_bf16(true, false, OC, IC, N, d, OC, x, IC, 1.0f, dweight, IC);
  }
  if (dbias != nullptr) bias_backward(dbias, dout, N, OC);
}

std::string bf16_matmul_refusal(const CpuFeatures& f, const KernelChoice& choice, const OnednnInfo& lib) {
  if (choice.bf16 == KernelPath::kSse) {
    const KernelChoice full = choose_kernel_path(f);
    if (full.bf16 != KernelPath::kSse)
      return "train.dtype = \"bf16\" on run.device = \"cpu\" needs the CPU's bf16 path, and "
             "FLOTILLA_CPU_PATH "
             "narrows this run to " +
             std::string(kernel_path_name(choice.widest)) + ": unset it or use train.dtype = \"fp32\"";
    return "train.dtype = \"bf16\" on run.device = \"cpu\" needs AVX512_BF16 or AMX-BF16, and this CPU (" +
           (f.brand.empty() ? f.vendor : f.brand) + ": " + describe_features(f) +
           ") has neither usable: use train.dtype = \"fp32\" (or run.device = \"cuda\")";
  }
  if (!lib.loaded)
    return "train.dtype = \"bf16\" on run.device = \"cpu\" runs its matmuls on oneDNN: " + lib.error +
           "; or use train.dtype = \"fp32\"";
  return "";
}

std::string bf16_matmul_refusal() {
  return bf16_matmul_refusal(cpu_features(), blas_info().choice, onednn_info());
}

std::string bf16_matmul_path() {
  const OnednnInfo& lib = onednn_info();
  const KernelChoice& c = blas_info().choice;
  if (c.bf16 == KernelPath::kSse || !lib.loaded) return "none";
  const std::string impl = onednn_last_impl();
  std::string hand;  // the cases the measured choice gave to the hand kernel
  for (int k = 0; k < kBf16GemmCases; ++k)
    if (bf16_gemm_choice().hand[k]) hand += std::string(hand.empty() ? "" : ", ") + bf16_gemm_case_name(k);
  return std::string(kernel_path_name(c.bf16)) + " (oneDNN " + lib.version +
         (impl.empty() ? "" : " " + impl) + ")" + (hand.empty() ? "" : "; avx512 kernel for " + hand);
}

}  // namespace flotilla::cpu
