// The CPU's bf16 matmul path (engine/cpu/matmul_bf16.h, oneDNN) against an fp64 reference, and
// its refusal on CPUs without bf16 instructions.
//
// On a CPU with AVX512_BF16 or AMX-BF16 and oneDNN present: round_to_bf16 equals the engine's
// scalar to_bf16 bit for bit; gemm_bf16 (all four transpose cases, odd shapes, beta 0 and 1,
// threaded slices and deterministic chunks) equals the fp64 product of the bf16-ROUNDED operands
// within fp32 accumulation (2e-6 of sum |a*b|), and the fp64 product of the unrounded fp32
// operands within bf16 rounding (2^-7 of sum |a*b|, twice the 2^-8 two roundings allow); the
// linear layers' forward and backward (dinp, dweight accumulated, dbias) likewise; deterministic
// mode gives the same bits on 1, 2 and 3 threads. Everywhere: the refusal names train.dtype and
// the missing feature for a feature set without bf16, FLOTILLA_CPU_PATH when it narrows the path,
// oneDNN when it is missing; the CPU backend refuses or accepts bf16 as this machine allows.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "engine/backend/registry.h"
#include "engine/cpu/blas.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/matmul_bf16.h"
#include "engine/cpu/onednn.h"

using namespace flotilla;

namespace {

uint32_t g_seed = 12345u;
float rnd() {
  g_seed = g_seed * 1664525u + 1013904223u;
  return static_cast<float>((g_seed >> 8) & 0xffff) / 32768.0f - 1.0f;
}
std::vector<float> random_vec(size_t n) {
  std::vector<float> v(n);
  for (auto& x : v) x = rnd();
  return v;
}
float r16(float x) { return from_bf16(to_bf16(x)); }

struct Shape {
  bool ta, tb;
  int M, N, K;
};

// Worst |C - ref| / (sum |a*b| + tiny) of gemm_bf16 against fp64 on rounded (`exact`) or unrounded
// operands; C starts at 0.5 and beta is 0 or 1.
double gemm_error(const Shape& s, float beta, int threads, bool fixed, bool rounded_ref,
                  std::vector<float>* out) {
  const int lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
  g_seed = 777u + static_cast<uint32_t>(s.M * 7 + s.N * 3 + s.K);
  std::vector<float> A = random_vec(static_cast<size_t>(s.M) * s.K),
                     B = random_vec(static_cast<size_t>(s.K) * s.N);
  std::vector<bf16_t> A16(A.size()), B16(B.size());
  cpu::round_to_bf16(A16.data(), A.data(), A.size());
  cpu::round_to_bf16(B16.data(), B.data(), B.size());
  std::vector<float> C(static_cast<size_t>(s.M) * s.N, 0.5f);
  cpu::set_thread_independent_gemm(fixed);
  omp_set_num_threads(threads);
  cpu::gemm_bf16(s.ta, s.tb, s.M, s.N, s.K, A16.data(), lda, B16.data(), ldb, beta, C.data(), s.N);
  cpu::set_thread_independent_gemm(false);
  double worst = 0;
  for (int i = 0; i < s.M; ++i)
    for (int j = 0; j < s.N; ++j) {
      double ref = 0, mag = 0;
      for (int k = 0; k < s.K; ++k) {
        double a = s.ta ? A[static_cast<size_t>(k) * lda + i] : A[static_cast<size_t>(i) * lda + k];
        double b = s.tb ? B[static_cast<size_t>(j) * ldb + k] : B[static_cast<size_t>(k) * ldb + j];
        if (rounded_ref) a = r16(static_cast<float>(a)), b = r16(static_cast<float>(b));
        ref += a * b;
        mag += std::fabs(a * b);
      }
      ref += beta * 0.5;
      worst = std::max(worst, std::fabs(C[static_cast<size_t>(i) * s.N + j] - ref) / (mag + 1e-30));
    }
  if (out) *out = C;
  return worst;
}

// The linear layer in bf16 against fp64 (unrounded operands): worst relative error of out, dinp,
// dweight and dbias, each relative to its sum of |products|.
double linear_error(int N, int IC, int OC) {
  g_seed = 99u + static_cast<uint32_t>(N + IC + OC);
  const auto inp = random_vec(static_cast<size_t>(N) * IC), w = random_vec(static_cast<size_t>(OC) * IC),
             bias = random_vec(OC), dout = random_vec(static_cast<size_t>(N) * OC);
  std::vector<float> out(static_cast<size_t>(N) * OC), dinp(static_cast<size_t>(N) * IC),
      dw(static_cast<size_t>(OC) * IC, 0.25f), db(OC, 0.5f);
  cpu::matmul_forward_bf16(out.data(), inp.data(), w.data(), bias.data(), N, IC, OC);
  cpu::matmul_backward_bf16(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, IC, OC);
  double worst = 0;
  auto rel = [&](double got, double ref, double mag) {
    worst = std::max(worst, std::fabs(got - ref) / (mag + 1e-30));
  };
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double ref = bias[o], mag = std::fabs(bias[o]);
      for (int i = 0; i < IC; ++i) {
        ref += static_cast<double>(inp[static_cast<size_t>(n) * IC + i]) * w[static_cast<size_t>(o) * IC + i];
        mag += std::fabs(static_cast<double>(inp[static_cast<size_t>(n) * IC + i]) *
                         w[static_cast<size_t>(o) * IC + i]);
      }
      rel(out[static_cast<size_t>(n) * OC + o], ref, mag);
    }
  for (int n = 0; n < N; ++n)
    for (int i = 0; i < IC; ++i) {
      double ref = 0, mag = 0;
      for (int o = 0; o < OC; ++o) {
        const double p =
            static_cast<double>(dout[static_cast<size_t>(n) * OC + o]) * w[static_cast<size_t>(o) * IC + i];
        ref += p, mag += std::fabs(p);
      }
      rel(dinp[static_cast<size_t>(n) * IC + i], ref, mag);
    }
  for (int o = 0; o < OC; ++o) {
    for (int i = 0; i < IC; ++i) {
      double ref = 0.25, mag = 0.25;
      for (int n = 0; n < N; ++n) {
        const double p =
            static_cast<double>(dout[static_cast<size_t>(n) * OC + o]) * inp[static_cast<size_t>(n) * IC + i];
        ref += p, mag += std::fabs(p);
      }
      rel(dw[static_cast<size_t>(o) * IC + i], ref, mag);
    }
    double ref = 0.5, mag = 0.5;
    for (int n = 0; n < N; ++n)
      ref += dout[static_cast<size_t>(n) * OC + o], mag += std::fabs(dout[static_cast<size_t>(n) * OC + o]);
    // dbias sums the fp32 dout: fp32 accuracy, far inside the bf16 bound used for the rest.
    CHECK_MSG(std::fabs(db[o] - ref) <= 1e-5 * mag, "dbias[%d] = %g, reference %g", o, db[o], ref);
  }
  return worst;
}

void test_refusal() {
  cpu::CpuFeatures no_bf16;
  no_bf16.vendor = "GenuineIntel";
  no_bf16.brand = "Test CPU without bf16";
  no_bf16.avx2 = no_bf16.fma = no_bf16.avx512f = no_bf16.avx512bw = no_bf16.avx512vl = no_bf16.avx512dq =
      no_bf16.avx512cd = true;
  no_bf16.os_avx = no_bf16.os_avx512 = true;
  cpu::OnednnInfo loaded;
  loaded.loaded = true;
  const std::string a = cpu::bf16_matmul_refusal(no_bf16, cpu::choose_kernel_path(no_bf16), loaded);
  CHECK_MSG(a.find("train.dtype = \"bf16\"") != std::string::npos &&
                a.find("AVX512_BF16") != std::string::npos && a.find("AMX-BF16") != std::string::npos &&
                a.find("Test CPU without bf16") != std::string::npos &&
                a.find("train.dtype = \"fp32\"") != std::string::npos,
            "got [%s]", a.c_str());
  // The same CPU with AVX512_BF16, but the OS does not save the AVX-512 state: still refused.
  cpu::CpuFeatures no_os = no_bf16;
  no_os.avx512_bf16 = true;
  no_os.os_avx512 = false;
  CHECK(!cpu::bf16_matmul_refusal(no_os, cpu::choose_kernel_path(no_os), loaded).empty());
  cpu::CpuFeatures with_bf16 = no_bf16;
  with_bf16.avx512_bf16 = true;
  CHECK(cpu::bf16_matmul_refusal(with_bf16, cpu::choose_kernel_path(with_bf16), loaded).empty());
  // FLOTILLA_CPU_PATH=avx512 narrows a bf16 CPU: named.
  const std::string b = cpu::bf16_matmul_refusal(
      with_bf16, cpu::choose_kernel_path(with_bf16, cpu::KernelPath::kAvx512), loaded);
  CHECK_MSG(b.find("FLOTILLA_CPU_PATH") != std::string::npos && b.find("train.dtype") != std::string::npos,
            "got [%s]", b.c_str());
  cpu::OnednnInfo missing;
  missing.error = "cannot load oneDNN (libdnnl.so.2: cannot open shared object file)";
  const std::string c = cpu::bf16_matmul_refusal(with_bf16, cpu::choose_kernel_path(with_bf16), missing);
  CHECK_MSG(c.find("oneDNN") != std::string::npos && c.find("train.dtype") != std::string::npos, "got [%s]",
            c.c_str());

  // This machine's backend: accepts bf16 exactly when the refusal is empty, with the reason otherwise.
  Backend& be = get_backend("cpu");
  const std::string here = cpu::bf16_matmul_refusal();
  if (here.empty()) {
    be.set_matmul_dtype(DType::kBF16);
    CHECK(be.matmul_dtype() == DType::kBF16);
    CHECK(be.describe().find("bf16 matmuls") != std::string::npos);
  } else {
    CHECK_THROWS(be.set_matmul_dtype(DType::kBF16), "train.dtype");
    CHECK(be.matmul_dtype() == DType::kF32);
  }
  be.set_matmul_dtype(DType::kF32);
  CHECK(be.matmul_dtype() == DType::kF32);
}

}  // namespace

int main() {
  test_refusal();
  const std::string why = cpu::bf16_matmul_refusal();
  if (!why.empty()) {
    std::printf("bf16 matmuls not available here (%s): numerics skipped\n", why.c_str());
    return flotilla_test::summary("cpu_bf16_matmul");
  }
  std::printf("bf16 path: %s\n", cpu::bf16_matmul_path().c_str());

  // Rounding: the vector conversion is the scalar round-to-nearest-even (normal numbers).
  {
    g_seed = 4242u;
    std::vector<float> x(100003);
    for (auto& v : x) v = rnd() * std::ldexp(1.0f, static_cast<int>(g_seed % 40) - 20);
    x[7] = 1.00390625f;  // halfway between two bf16 values, even below
    x[8] = 1.01171875f;  // halfway, even above
    x[9] = -0.0f;
    std::vector<bf16_t> y(x.size());
    cpu::round_to_bf16(y.data(), x.data(), x.size());
    int mismatches = 0;
    for (size_t i = 0; i < x.size(); ++i) mismatches += y[i].bits != to_bf16(x[i]).bits;
    CHECK_MSG(mismatches == 0, "%d of %zu roundings differ from to_bf16", mismatches, x.size());
  }

  const Shape shapes[] = {{false, true, 64, 96, 48},  {false, false, 37, 53, 29},
                          {true, false, 45, 33, 70},  {true, true, 19, 21, 23},
                          {false, true, 16, 700, 40}, {false, false, 130, 17, 300}};
  double exact = 0, vs_fp32 = 0;
  for (const Shape& s : shapes)
    for (float beta : {0.0f, 1.0f})
      for (int threads : {1, 2})
        for (bool fixed : {false, true}) {
          exact = std::max(exact, gemm_error(s, beta, threads, fixed, true, nullptr));
          vs_fp32 = std::max(vs_fp32, gemm_error(s, beta, threads, fixed, false, nullptr));
        }
  std::printf("gemm_bf16: max error / sum|a*b|: %.3g against rounded operands, %.3g against fp32 operands\n",
              exact, vs_fp32);
  CHECK_MSG(exact < 2e-6, "against the rounded operands: %.3g (fp32 accumulation expected)", exact);
  CHECK_MSG(vs_fp32 < 0x1p-7, "against fp32 operands: %.3g (bf16 rounding bound 2^-7)", vs_fp32);
  CHECK_MSG(vs_fp32 > 1e-5, "against fp32 operands: %.3g, too exact for bf16 operands (not rounded?)",
            vs_fp32);

  // Deterministic chunks: the same bits on 1, 2 and 3 threads.
  for (const Shape& s : {shapes[0], shapes[4], shapes[5]}) {
    std::vector<float> c1, c2, c3;
    gemm_error(s, 1.0f, 1, true, true, &c1);
    gemm_error(s, 1.0f, 2, true, true, &c2);
    gemm_error(s, 1.0f, 3, true, true, &c3);
    CHECK(std::memcmp(c1.data(), c2.data(), c1.size() * 4) == 0);
    CHECK(std::memcmp(c1.data(), c3.data(), c1.size() * 4) == 0);
  }

  omp_set_num_threads(2);
  for (bool fixed : {false, true}) {
    cpu::set_thread_independent_gemm(fixed);
    const double lin = std::max(linear_error(70, 48, 96), linear_error(32, 64, 1100));
    std::printf("linear layer bf16 (%s): max error / sum|products| %.3g\n", fixed ? "chunks" : "slices", lin);
    CHECK_MSG(lin < 0x1p-7 && lin > 1e-5, "linear layer: %.3g", lin);
  }
  cpu::set_thread_independent_gemm(false);
  return flotilla_test::summary("cpu_bf16_matmul");
}
