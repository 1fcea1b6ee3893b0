// The two fp32 sgemm libraries the engine may run (blas.h: the one measured faster is the
// default) give the same products within fp32 rounding on the awkward cases: every transpose
// pair, leading dimensions wider than the matrix, beta 0 / 1 / 0.5 accumulation, alpha, tiny and
// 0-sized shapes (M or N = 0 leaves C untouched, K = 0 gives beta * C), and neither writes outside
// the M x N window: the padding columns of ldc and a guard block after C keep their sentinel.
// beta = 0 overwrites a C full of NaN. OpenBLAS runs through blas_sgemm (FLOTILLA_SGEMM=openblas is set
// before the first BLAS call), oneDNN through onednn_sgemm; both are checked against an fp64 reference and
// against each other.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "check.h"
#include "engine/cpu/blas.h"
#include "engine/cpu/onednn.h"
#include "test_reference_ops.h"

using namespace flotilla;

namespace {

constexpr float kSentinel = -7777.0f;
constexpr int kGuard = 64;  // floats after the last row of C

struct Case {
  bool ta, tb;
  int M, N, K;
  int pad_a, pad_b, pad_c;  // leading dimension minus its minimum
  float alpha, beta;
};

struct Result {
  std::vector<float> C;       // ldc * M + guard
  std::vector<double> scale;  // per element of the M x N window: |alpha| sum |a b| + |beta c|
  double worst_rel = 0;       // max |C - ref| / (|alpha| sum |a b| + |beta c| + tiny)
  bool outside_ok = true;     // padding and guard untouched
};

Result run(const Case& c, bool onednn) {
  // BLAS's rule: a leading dimension is at least max(1, the row length), also for empty matrices.
  const int lda = std::max(1, c.ta ? c.M : c.K) + c.pad_a, ldb = std::max(1, c.tb ? c.K : c.N) + c.pad_b,
            ldc = std::max(1, c.N) + c.pad_c;
  const int a_rows = c.ta ? c.K : c.M, b_rows = c.tb ? c.N : c.K;
  std::vector<float> A(static_cast<size_t>(std::max(a_rows, 1)) * std::max(lda, 1), kSentinel),
      B(static_cast<size_t>(std::max(b_rows, 1)) * std::max(ldb, 1), kSentinel);
  uint32_t x = 99u + static_cast<uint32_t>(c.M * 131 + c.N * 17 + c.K);
  auto rnd = [&] {
    x = x * 1664525u + 1013904223u;
    return static_cast<float>((x >> 8) & 0xffff) / 32768.0f - 1.0f;
  };
  const int a_cols = c.ta ? c.M : c.K, b_cols = c.tb ? c.K : c.N;
  for (int r = 0; r < a_rows; ++r)
    for (int k = 0; k < a_cols; ++k) A[static_cast<size_t>(r) * lda + k] = rnd();
  for (int r = 0; r < b_rows; ++r)
    for (int k = 0; k < b_cols; ++k) B[static_cast<size_t>(r) * ldb + k] = rnd();
  Result res;
  res.C.assign(static_cast<size_t>(c.M) * ldc + kGuard, kSentinel);
  std::vector<float> C0(static_cast<size_t>(c.M) * c.N);
  // beta = 0 must overwrite C without reading it (the engine hands over uninitialised buffers):
  // NaN there must not come through.
  for (int i = 0; i < c.M; ++i)
    for (int j = 0; j < c.N; ++j)
      res.C[static_cast<size_t>(i) * ldc + j] = C0[static_cast<size_t>(i) * c.N + j] =
          c.beta == 0.0f ? std::nanf("") : rnd();
  if (onednn)
    cpu::onednn_sgemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta, res.C.data(),
                      ldc);
  else if (c.M > 0 && c.N > 0)  // the engine's callers skip empty outputs (matmul.cpp's gemm_serial)
    cpu::blas_sgemm(c.ta, c.tb, c.M, c.N, c.K, c.alpha, A.data(), lda, B.data(), ldb, c.beta, res.C.data(),
                    ldc);
  for (int i = 0; i < c.M; ++i) {
    for (int j = 0; j < c.N; ++j) {
      const flotilla_test::RefDot d =
          flotilla_test::ref_gemm_entry(c.ta, c.tb, A.data(), lda, B.data(), ldb, i, j, c.K);
      double ref = d.value;
      const double mag = d.magnitude;
      const double c0 = C0[static_cast<size_t>(i) * c.N + j];
      const double bc = c.beta == 0.0f ? 0.0 : c.beta * c0;
      ref = c.alpha * ref + bc;
      const double scale = std::fabs(c.alpha) * mag + std::fabs(bc) + 1e-30;
      res.scale.push_back(scale);
      const double err = std::fabs(res.C[static_cast<size_t>(i) * ldc + j] - ref) / scale;
      res.worst_rel = std::max(res.worst_rel, std::isfinite(err) ? err : 1e30);
    }
    for (int j = c.N; j < ldc; ++j) res.outside_ok &= res.C[static_cast<size_t>(i) * ldc + j] == kSentinel;
  }
  for (int g = 0; g < kGuard; ++g) res.outside_ok &= res.C[static_cast<size_t>(c.M) * ldc + g] == kSentinel;
  return res;
}

}  // namespace

int main() {
  setenv("FLOTILLA_SGEMM", "openblas", 1);  // blas_sgemm is OpenBLAS's; oneDNN is called directly
  const cpu::BlasInfo& info = cpu::blas_info();
  CHECK(!info.onednn_sgemm);
  if (!cpu::onednn_info().loaded) {
    std::printf("oneDNN not loaded (%s): nothing to compare\n", cpu::onednn_info().error.c_str());
    return flotilla_test::summary("sgemm_agreement");
  }
  std::printf("OpenBLAS core %s against oneDNN %s (ISA %s)\n", info.loaded_core.c_str(),
              cpu::onednn_info().version.c_str(), cpu::onednn_isa_name().c_str());
  std::vector<Case> cases;
  const int dims[][3] = {{1, 1, 1},     {1, 17, 33},   {17, 1, 33},    {3, 5, 0},    {0, 5, 7},
                         {5, 0, 7},     {37, 53, 29},  {45, 33, 70},   {64, 96, 48}, {130, 17, 300},
                         {16, 700, 40}, {96, 80, 385}, {200, 48, 1000}};
  for (const auto& d : dims)
    for (int t = 0; t < 4; ++t)
      for (float beta : {0.0f, 1.0f, 0.5f}) {
        const int pad = (d[0] + d[1] + t) % 3 == 0 ? 0 : 5 + t;
        cases.push_back({(t & 1) != 0, (t & 2) != 0, d[0], d[1], d[2], pad, (pad * 3) % 7, pad ? pad + 2 : 0,
                         beta == 0.5f ? -1.25f : 1.0f, beta});
      }
  int compared = 0;
  double worst_openblas = 0, worst_onednn = 0, worst_between = 0;
  for (const Case& c : cases) {
    const Result ob = run(c, false), od = run(c, true);
    worst_openblas = std::max(worst_openblas, ob.worst_rel);
    worst_onednn = std::max(worst_onednn, od.worst_rel);
    const int ldc = std::max(1, c.N) + c.pad_c;
    for (int i = 0; i < c.M; ++i)
      for (int j = 0; j < c.N; ++j) {
        const size_t at = static_cast<size_t>(i) * ldc + j;
        worst_between = std::max(worst_between,
                                 std::fabs(ob.C[at] - od.C[at]) / ob.scale[static_cast<size_t>(i) * c.N + j]);
      }
    CHECK_MSG(ob.outside_ok, "OpenBLAS wrote outside C: ta %d tb %d %dx%dx%d ldc pad %d", c.ta, c.tb, c.M,
              c.N, c.K, c.pad_c);
    CHECK_MSG(od.outside_ok, "oneDNN wrote outside C: ta %d tb %d %dx%dx%d ldc pad %d", c.ta, c.tb, c.M, c.N,
              c.K, c.pad_c);
    CHECK_MSG(ob.worst_rel < 2e-6 && od.worst_rel < 2e-6,
              "ta %d tb %d %dx%dx%d beta %g: OpenBLAS %.3g, oneDNN %.3g of the magnitude sum", c.ta, c.tb,
              c.M, c.N, c.K, c.beta, ob.worst_rel, od.worst_rel);
    ++compared;
  }
  std::printf(
      "%d cases: max error / (|alpha| sum|a*b| + |beta c|): OpenBLAS %.3g, oneDNN %.3g, between them "
      "%.3g\n",
      compared, worst_openblas, worst_onednn, worst_between);
  CHECK_MSG(worst_between < 4e-6, "the libraries differ by %.3g", worst_between);
  return flotilla_test::summary("sgemm_agreement");
}
