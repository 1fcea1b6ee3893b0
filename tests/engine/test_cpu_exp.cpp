// exp_f32 (engine/cpu/simd.h) against double over the whole fp32 range, and the SwiGLU kernels that
// use it against a double reference. exp_f32 is within 2 ulp of the exact e^x (1.03 at worst over all
// 2^32 inputs) on a strided sweep of all 2^32 bit patterns plus dense sweeps at the edges (overflow,
// the subnormal results, the underflow to 0, around 0), in the baseline build (no FMA) and in the
// per-instruction-set clone this machine runs (FMA contracted); +inf, -inf, NaN, +-0 and the two
// thresholds come out as libm's. FLOTILLA_EXP_EXHAUSTIVE=1 checks every bit pattern (about a minute).
// swiglu_forward and swiglu_backward equal a double-precision reference to a few ulp, with gates
// from -120 to 120.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "check.h"
#include "engine/core/rng.h"
#include "engine/cpu/simd.h"
#include "engine/cpu/swiglu.h"

using namespace flotilla;

namespace {

// The baseline instruction set (this file is compiled portable: SSE2, no FMA).
__attribute__((noinline)) void exp_plain(float* out, const float* in, long n) {
  for (long i = 0; i < n; ++i) out[i] = cpu::exp_f32(in[i]);
}

// The clone the engine's kernels run on this machine (AVX-512 or AVX2 with FMA where there is one).
FLOTILLA_SIMD_CLONES __attribute__((noinline)) void exp_cloned(float* out, const float* in, long n) {
#pragma omp simd
  for (long i = 0; i < n; ++i) out[i] = cpu::exp_f32(in[i]);
}

// Error of y in ulps of the exact e^x (the ulp of a subnormal is 2^-149); -1 for a mismatch on the
// values that must be exact (NaN, 0, inf).
double ulp_error(float x, float y) {
  if (std::isnan(x)) return std::isnan(y) ? 0.0 : -1.0;
  const double e = std::exp(static_cast<double>(x));
  const float rounded = static_cast<float>(e);
  if (rounded == 0.0f || std::isinf(rounded) || std::isinf(y) || y == 0.0f) return y == rounded ? 0.0 : -1.0;
  int ex = 0;
  std::frexp(e, &ex);
  return std::fabs(static_cast<double>(y) - e) / std::ldexp(1.0, ex - 24 < -149 ? -149 : ex - 24);
}

struct Sweep {
  double worst = 0;
  float at = 0;
  long bad = 0, count = 0;
};

void check_inputs(const std::vector<float>& in, Sweep* plain, Sweep* cloned) {
  std::vector<float> a(in.size()), b(in.size());
  exp_plain(a.data(), in.data(), static_cast<long>(in.size()));
  exp_cloned(b.data(), in.data(), static_cast<long>(in.size()));
  for (size_t i = 0; i < in.size(); ++i)
    for (auto [s, y] : {std::pair{plain, a[i]}, std::pair{cloned, b[i]}}) {
      const double e = ulp_error(in[i], y);
      ++s->count;
      if (e < 0) {
        if (s->bad++ < 5) std::fprintf(stderr, "exp_f32(%a) = %a, want %a\n", in[i], y, std::exp(in[i]));
      } else if (e > s->worst) {
        s->worst = e;
        s->at = in[i];
      }
    }
}

void exp_range() {
  const char* env = std::getenv("FLOTILLA_EXP_EXHAUSTIVE");
  const uint64_t stride = env != nullptr && env[0] == '1' ? 1 : 61;  // 61: ~70 M inputs, a few seconds
  Sweep plain, cloned;
  std::vector<float> in;
  in.reserve(1 << 20);
  auto flush = [&] {
    check_inputs(in, &plain, &cloned);
    in.clear();
  };
  for (uint64_t b = 0; b < (1ULL << 32); b += stride) {
    in.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
    if (in.size() == (1 << 20)) flush();
  }
  // Dense around the edges: 2^16 neighbours each side of the overflow and underflow thresholds, of the
  // first subnormal result (x = -87.34) and of 0.
  for (float centre : {88.7228317f, -103.972076f, -87.3365479f, 0.0f, -0.0f}) {
    float up = centre, down = centre;
    for (int i = 0; i < (1 << 16); ++i) {
      in.push_back(up);
      in.push_back(down);
      up = std::nextafter(up, INFINITY);
      down = std::nextafter(down, -INFINITY);
    }
  }
  flush();
  for (const Sweep* s : {&plain, &cloned}) {
    std::printf("exp_f32 (%s, %s): %ld inputs, max error %.4f ulp at x = %.9g, %ld wrong specials\n",
                s == &plain ? "baseline" : "cloned", s == &plain ? "no FMA" : cpu::simd_level(), s->count,
                s->worst, static_cast<double>(s->at), s->bad);
    CHECK_MSG(s->worst <= 2.0, "max error %.4f ulp at %a", s->worst, s->at);
    CHECK(s->bad == 0);
  }
}

void exp_specials() {
  const float kHi = 88.722831726074219f, kLo = -103.97207641601562f;
  const std::vector<float> in = {INFINITY, -INFINITY,
                                 NAN,      -NAN,
                                 0.0f,     -0.0f,
                                 kHi,      std::nextafter(kHi, INFINITY),
                                 kLo,      std::nextafter(kLo, -INFINITY),
                                 -87.5f,   -100.0f,
                                 88.5f,    1e30f,
                                 -1e30f};
  for (int which = 0; which < 2; ++which) {
    std::vector<float> y(in.size());
    (which == 0 ? exp_plain : exp_cloned)(y.data(), in.data(), static_cast<long>(in.size()));
    CHECK(y[0] == INFINITY && y[1] == 0.0f && std::isnan(y[2]) && std::isnan(y[3]));
    CHECK(y[4] == 1.0f && y[5] == 1.0f);
    CHECK_MSG(std::isfinite(y[6]) && y[6] > 3.4e38f && y[7] == INFINITY, "e^kHi %a, next %a", y[6], y[7]);
    CHECK_MSG(y[8] == std::ldexp(1.0f, -149) && y[9] == 0.0f, "e^kLo %a, next %a", y[8], y[9]);
    CHECK_MSG(y[10] > 0.0f && y[10] < 1.2e-38f && y[11] > 0.0f, "subnormal results %a %a", y[10], y[11]);
    CHECK(y[12] == std::exp(88.5f) || ulp_error(88.5f, y[12]) <= 2.0);
    CHECK(y[13] == INFINITY && y[14] == 0.0f);
  }
}

void swiglu_reference() {
  const long N = 37;
  const int F = 203;  // not a multiple of the vector width
  Rng rng(7);
  std::vector<float> inp(static_cast<size_t>(N) * 2 * F), dout(static_cast<size_t>(N) * F);
  for (size_t i = 0; i < inp.size(); ++i)
    inp[i] = (rng.uniform() - 0.5f) * (i % 7 == 0 ? 240.0f : 12.0f);  // gates up to +-120: exp's ends
  for (float& v : dout) v = rng.uniform() - 0.5f;
  std::vector<float> out(dout.size()), dinp(inp.size());
  cpu::swiglu_forward(out.data(), inp.data(), N, F);
  cpu::swiglu_backward(dinp.data(), dout.data(), inp.data(), N, F);
  double worst_out = 0, worst_dg = 0, worst_du = 0;
  for (long r = 0; r < N; ++r)
    for (int j = 0; j < F; ++j) {
      const size_t gi = static_cast<size_t>(r) * 2 * F + j, oi = static_cast<size_t>(r) * F + j;
      const double g = inp[gi], u = inp[gi + F], d = dout[oi];
      const double sig = 1.0 / (1.0 + std::exp(-g));
      const double o = g * sig * u, du = d * g * sig, dg = d * u * sig * (1.0 + g * (1.0 - sig));
      // relative to the magnitude of the terms (a few fp32 roundings each)
      worst_out = std::max(worst_out, std::fabs(out[oi] - o) / (std::fabs(g * u) + 1e-30));
      worst_du = std::max(worst_du, std::fabs(dinp[gi + F] - du) / (std::fabs(d * g) + 1e-30));
      worst_dg =
          std::max(worst_dg, std::fabs(dinp[gi] - dg) / (std::fabs(d * u) * (1.0 + std::fabs(g)) + 1e-30));
    }
  std::printf("swiglu vs double: out %.3g, d(up) %.3g, d(gate) %.3g (relative)\n", worst_out, worst_du,
              worst_dg);
  CHECK(worst_out < 4e-7 && worst_du < 4e-7 && worst_dg < 8e-7);
}

}  // namespace

int main() {
  exp_specials();
  exp_range();
  swiglu_reference();
  return flotilla_test::summary("cpu_exp");
}
