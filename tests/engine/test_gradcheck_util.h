// Helpers shared by the gradient-check tests: random tensors (never zeros) and error metrics.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/core/rng.h"

namespace flotilla_test {

// Uniform in [lo, hi) excluding a small band around zero, so no input is (near) zero.
inline std::vector<float> random_vec(flotilla::Rng& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::vector<float> v(n);
  for (auto& x : v) {
    do {
      x = lo + (hi - lo) * rng.uniform();
    } while (std::fabs(x) < 1e-3f);
  }
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// max |a - b| / max |b|: the error relative to the tensor's scale (robust to tiny elements).
template <typename A, typename B>
double rel_err(const A& a, const B& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
    den = std::max(den, std::fabs(static_cast<double>(b[i])));
  }
  return num / std::max(den, 1e-30);
}

// Central difference of a scalar function J(x) of a double vector, at the listed indices.
template <typename Fn>
std::vector<double> finite_diff(Fn&& J, std::vector<double> x, const std::vector<size_t>& idx,
                                double h = 1e-6) {
  std::vector<double> g(idx.size());
  for (size_t k = 0; k < idx.size(); ++k) {
    const double x0 = x[idx[k]];
    x[idx[k]] = x0 + h;
    const double jp = J(x);
    x[idx[k]] = x0 - h;
    const double jm = J(x);
    x[idx[k]] = x0;
    g[k] = (jp - jm) / (2 * h);
  }
  return g;
}

inline std::vector<size_t> all_indices(size_t n) {
  std::vector<size_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

// `count` distinct-ish random indices below n (all of them when n <= count).
inline std::vector<size_t> sample_indices(flotilla::Rng& rng, size_t n, size_t count) {
  if (n <= count) return all_indices(n);
  std::vector<size_t> v(count);
  for (auto& i : v) i = static_cast<size_t>(rng.below(n));
  return v;
}

template <typename V>
std::vector<double> gather(const V& v, const std::vector<size_t>& idx) {
  std::vector<double> out(idx.size());
  for (size_t k = 0; k < idx.size(); ++k) out[k] = static_cast<double>(v[idx[k]]);
  return out;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace flotilla_test
