// Float64 reference implementations of the kernel families, written independently of the
// engine for the gradient-check tests (shapes as in engine/cpu/<family>.h).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace flotilla_test {

using Vec = std::vector<double>;

inline Vec ref_layernorm(const Vec& x, const Vec& w, const Vec& b, int N, int C) {
  Vec out(x.size());
  for (int r = 0; r < N; ++r) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += x[r * C + c];
    m /= C;
    for (int c = 0; c < C; ++c) v += (x[r * C + c] - m) * (x[r * C + c] - m);
    v /= C;
    const double s = 1.0 / std::sqrt(v + 1e-5);
    for (int c = 0; c < C; ++c) out[r * C + c] = (x[r * C + c] - m) * s * w[c] + b[c];
  }
  return out;
}

inline Vec ref_matmul(const Vec& x, const Vec& w, const Vec& bias, int N, int IC, int OC) {
  Vec out(static_cast<size_t>(N) * OC);
  for (int r = 0; r < N; ++r)
    for (int o = 0; o < OC; ++o) {
      double s = bias.empty() ? 0.0 : bias[o];
      for (int i = 0; i < IC; ++i) s += x[r * IC + i] * w[o * IC + i];
      out[r * OC + o] = s;
    }
  return out;
}

inline Vec ref_attention(const Vec& qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  Vec out(static_cast<size_t>(B) * T * C);
  std::vector<double> p(T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int i = 0; i < T; ++i) {
        const double* q = &qkv[(b * T + i) * 3 * C + h * hs];
        double mx = -1e300;
        for (int j = 0; j <= i; ++j) {
          const double* k = &qkv[(b * T + j) * 3 * C + C + h * hs];
          double s = 0;
          for (int d = 0; d < hs; ++d) s += q[d] * k[d];
          p[j] = s / std::sqrt(static_cast<double>(hs));
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (int j = 0; j <= i; ++j) sum += (p[j] = std::exp(p[j] - mx));
        for (int d = 0; d < hs; ++d) {
          double o = 0;
          for (int j = 0; j <= i; ++j) o += p[j] / sum * qkv[(b * T + j) * 3 * C + 2 * C + h * hs + d];
          out[(b * T + i) * C + h * hs + d] = o;
        }
      }
  return out;
}

// Entry (i, j) of op(A) op(B) in fp64 for row-major A and B with leading dimensions (ta: A stored
// K x M; tb: B stored N x K), with the sum of the products' magnitudes: the scale rounding errors
// of an fp32 gemm are judged against.
struct RefDot {
  double value = 0, magnitude = 0;
};
inline RefDot ref_gemm_entry(bool ta, bool tb, const float* A, int lda, const float* B, int ldb, int i, int j,
                             int K) {
  RefDot r;
  for (int k = 0; k < K; ++k) {
    const double a = ta ? A[static_cast<size_t>(k) * lda + i] : A[static_cast<size_t>(i) * lda + k];
    const double b = tb ? B[static_cast<size_t>(j) * ldb + k] : B[static_cast<size_t>(k) * ldb + j];
    r.value += a * b;
    r.magnitude += std::fabs(a * b);
  }
  return r;
}

inline double ref_gelu(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

inline Vec ref_ce(const Vec& logits, const std::vector<int32_t>& targets, int N, int V, int Vp) {
  Vec loss(N);
  for (int r = 0; r < N; ++r) {
    double mx = -1e300, s = 0;
    for (int j = 0; j < V; ++j) mx = std::max(mx, logits[r * Vp + j]);
    for (int j = 0; j < V; ++j) s += std::exp(logits[r * Vp + j] - mx);
    loss[r] = mx + std::log(s) - logits[r * Vp + targets[r]];
  }
  return loss;
}

}  // namespace flotilla_test
