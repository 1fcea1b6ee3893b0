// The flash-style CPU attention (engine/cpu/attention.cpp: key tiles, online softmax) against
//   - a float64 reference written here (softmax(Q K^T / sqrt(HD)) V, lse, and the exact gradients
//     dQ, dK, dV), for T in {1, 63, 64, 65, 257, 1024, 2048}: one key tile, a partial one, several
//     (T = 1024 is four 256-key tiles; T = 2048 takes 128-row query blocks); GQA ratios 1, 3 and 4;
//     head sizes 64 and 128; packed documents;
//   - the kernels before the rewrite (cpu::reference, kept for this) at T = 8192 with small heads,
//     plus 32 sampled query rows of that forward against float64;
//   - itself on 1 and 2 threads at T = 1024 and 2048 (bit-identical: fixed tasks, no atomics);
//   - its scratch: the largest per-thread request at T = 8192 is attention_scratch_floats(), at
//     most 256.5 KiB for any T, where the old kernel asked for 4.03 MiB.
// Tolerance: error relative to the tensor's largest element, 2e-5 (as test_ops_gradcheck); fp32
// measures ~1e-6 here, a wrong rescale of the running sum lands above 1e-2.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "check.h"
#include "engine/cpu/attention.h"

using namespace flotilla;

namespace {

constexpr double kTol = 2e-5;

struct Case {
  int B, T, NH, NKV, HD;
  bool packed;
};

struct Data {
  Case c;
  std::vector<float> qkv, dout;
  std::vector<int32_t> pos;  // empty: no packed documents
  int ld() const { return (c.NH + 2 * c.NKV) * c.HD; }
  int ldo() const { return c.NH * c.HD; }
  const int32_t* posp() const { return pos.empty() ? nullptr : pos.data(); }
};

Data make(const Case& c, uint32_t seed) {
  Data d{c, {}, {}, {}};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  d.qkv.resize(static_cast<size_t>(c.B) * c.T * d.ld());
  for (size_t i = 0; i < d.qkv.size(); ++i) {
    const int col = static_cast<int>(i % static_cast<size_t>(d.ld()));
    // q and k of amplitude 3: peaked softmax rows whose max moves from tile to tile
    d.qkv[i] = u(rng) * (col < (c.NH + c.NKV) * c.HD ? 3.0f : 1.0f);
  }
  d.dout.resize(static_cast<size_t>(c.B) * c.T * d.ldo());
  for (auto& x : d.dout) x = u(rng);
  if (c.packed) {  // documents of varying length per row, one crossing a key-tile boundary
    d.pos.resize(static_cast<size_t>(c.B) * c.T);
    for (int b = 0; b < c.B; ++b) {
      int start = 0;
      const int lens[] = {37 + 11 * b, 300, 5, 700, 1};
      for (int t = 0, doc = 0; t < c.T; ++t) {
        if (t - start >= lens[doc % 5]) {
          start = t;
          ++doc;
        }
        d.pos[static_cast<size_t>(b) * c.T + t] = t - start;
      }
    }
  }
  return d;
}

struct Ref {
  std::vector<double> out, lse, dqkv;
};

// Float64 attention and its exact gradient (one (batch, head) at a time).
Ref reference(const Data& d) {
  const Case& c = d.c;
  const int ld = d.ld(), ldo = d.ldo(), group = c.NH / c.NKV;
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.HD));
  Ref r;
  r.out.assign(static_cast<size_t>(c.B) * c.T * ldo, 0.0);
  r.lse.assign(static_cast<size_t>(c.B) * c.NH * c.T, 0.0);
  r.dqkv.assign(d.qkv.size(), 0.0);
  std::vector<double> p(c.T), dp(c.T);
  for (int b = 0; b < c.B; ++b)
    for (int h = 0; h < c.NH; ++h) {
      const int g = h / group;
      auto Q = [&](int i, int e) {
        return static_cast<double>(d.qkv[(static_cast<size_t>(b) * c.T + i) * ld + h * c.HD + e]);
      };
      auto K = [&](int j, int e) {
        return static_cast<double>(d.qkv[(static_cast<size_t>(b) * c.T + j) * ld + (c.NH + g) * c.HD + e]);
      };
      auto V = [&](int j, int e) {
        return static_cast<double>(
            d.qkv[(static_cast<size_t>(b) * c.T + j) * ld + (c.NH + c.NKV + g) * c.HD + e]);
      };
      for (int i = 0; i < c.T; ++i) {
        const int lo = d.pos.empty() ? 0 : i - d.pos[static_cast<size_t>(b) * c.T + i];
        double mx = -1e300;
        for (int j = lo; j <= i; ++j) {
          double s = 0;
          for (int e = 0; e < c.HD; ++e) s += Q(i, e) * K(j, e);
          p[j] = s * scale;
          mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (int j = lo; j <= i; ++j) sum += (p[j] = std::exp(p[j] - mx));
        for (int j = lo; j <= i; ++j) p[j] /= sum;
        r.lse[(static_cast<size_t>(b) * c.NH + h) * c.T + i] = mx + std::log(sum);
        const size_t o = (static_cast<size_t>(b) * c.T + i) * ldo + h * c.HD;
        for (int e = 0; e < c.HD; ++e) {
          double acc = 0;
          for (int j = lo; j <= i; ++j) acc += p[j] * V(j, e);
          r.out[o + e] = acc;
        }
        // backward of this row: dP = dO V^T, dS = P (dP - sum P dP)
        double dsum = 0;
        for (int j = lo; j <= i; ++j) {
          double s = 0;
          for (int e = 0; e < c.HD; ++e) s += d.dout[o + e] * V(j, e);
          dp[j] = s;
          dsum += p[j] * s;
        }
        for (int j = lo; j <= i; ++j) {
          const double ds = p[j] * (dp[j] - dsum) * scale;
          double* dq = &r.dqkv[(static_cast<size_t>(b) * c.T + i) * ld + h * c.HD];
          double* dk = &r.dqkv[(static_cast<size_t>(b) * c.T + j) * ld + (c.NH + g) * c.HD];
          double* dv = &r.dqkv[(static_cast<size_t>(b) * c.T + j) * ld + (c.NH + c.NKV + g) * c.HD];
          for (int e = 0; e < c.HD; ++e) {
            dq[e] += ds * K(j, e);
            dk[e] += ds * Q(i, e);
            dv[e] += p[j] * d.dout[o + e];
          }
        }
      }
    }
  return r;
}

template <typename A, typename B>
double rel_err(const std::vector<A>& got, const std::vector<B>& want) {
  double mx = 0, err = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    mx = std::max(mx, std::fabs(static_cast<double>(want[i])));
    err = std::max(err, std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i])));
  }
  return mx > 0 ? err / mx : err;
}

struct Result {
  std::vector<float> out, lse, dqkv;
};

Result run_flash(const Data& d) {
  const Case& c = d.c;
  Result r;
  r.out.assign(static_cast<size_t>(c.B) * c.T * d.ldo(), 7.0f);  // garbage: must be overwritten
  r.lse.assign(static_cast<size_t>(c.B) * c.NH * c.T, 7.0f);
  r.dqkv.assign(d.qkv.size(), 1e3f);
  cpu::attention_forward(r.out.data(), r.lse.data(), d.qkv.data(), d.posp(), c.B, c.T, c.NH, c.NKV, c.HD);
  cpu::attention_backward(r.dqkv.data(), d.dout.data(), d.qkv.data(), r.out.data(), r.lse.data(), d.posp(),
                          c.B, c.T, c.NH, c.NKV, c.HD);
  return r;
}

Result run_old(const Data& d) {
  const Case& c = d.c;
  Result r;
  r.out.assign(static_cast<size_t>(c.B) * c.T * d.ldo(), 0.0f);
  r.lse.assign(static_cast<size_t>(c.B) * c.NH * c.T, 0.0f);
  r.dqkv.assign(d.qkv.size(), 0.0f);
  cpu::reference::attention_forward(r.out.data(), r.lse.data(), d.qkv.data(), d.posp(), c.B, c.T, c.NH, c.NKV,
                                    c.HD);
  cpu::reference::attention_backward(r.dqkv.data(), d.dout.data(), d.qkv.data(), r.out.data(), r.lse.data(),
                                     d.posp(), c.B, c.T, c.NH, c.NKV, c.HD);
  return r;
}

void test_against_float64() {
  const Case cases[] = {
      {1, 1, 3, 3, 64, false},    {2, 63, 3, 1, 64, false},   {1, 64, 4, 1, 128, false},
      {1, 65, 3, 3, 128, true},   {2, 257, 4, 1, 64, true},   {1, 257, 6, 2, 128, false},
      {1, 1024, 4, 1, 64, false}, {1, 1024, 2, 2, 128, true}, {1, 2048, 2, 1, 64, true},
  };
  uint32_t seed = 1;
  for (const Case& c : cases) {
    const Data d = make(c, seed++);
    const Result f = run_flash(d);
    const Ref r = reference(d);
    const double eo = rel_err(f.out, r.out), el = rel_err(f.lse, r.lse), eg = rel_err(f.dqkv, r.dqkv);
    std::printf("B=%d T=%d NH=%d NKV=%d HD=%d packed=%d: out %.2g lse %.2g dqkv %.2g\n", c.B, c.T, c.NH,
                c.NKV, c.HD, c.packed ? 1 : 0, eo, el, eg);
    CHECK_MSG(eo <= kTol, "T=%d out rel err %g", c.T, eo);
    CHECK_MSG(el <= kTol, "T=%d lse rel err %g", c.T, el);
    CHECK_MSG(eg <= kTol, "T=%d dqkv rel err %g", c.T, eg);
  }
}

// T = 8192, small heads: the new kernels against the old ones, 32 forward rows against float64,
// the scratch high-water mark, and 1 thread against 2.
void test_long_sequence() {
  const Case c{1, 8192, 2, 1, 64, false};
  const Data d = make(c, 99);
  cpu::reset_attention_scratch_high_water();
  const Result f = run_flash(d);
  const size_t high = cpu::attention_scratch_high_water_bytes();
  const size_t bound =
      std::max(cpu::attention_scratch_floats(true, c.T), cpu::attention_scratch_floats(false, c.T)) * 4;
  std::printf("T=8192 scratch per thread: %zu bytes (bound %zu)\n", high, bound);
  CHECK_MSG(high <= bound && bound <= 257 * 1024, "scratch %zu bytes, bound %zu", high, bound);

  const Result o = run_old(d);
  const double eo = rel_err(f.out, o.out), el = rel_err(f.lse, o.lse), eg = rel_err(f.dqkv, o.dqkv);
  std::printf("T=8192 flash vs old: out %.2g lse %.2g dqkv %.2g\n", eo, el, eg);
  CHECK_MSG(eo <= kTol && el <= kTol && eg <= kTol, "T=8192 vs old: %g %g %g", eo, el, eg);

  // 32 query rows of head 1 against float64
  const int ld = d.ld(), ldo = d.ldo(), HD = c.HD;
  double err = 0, mx = 0;
  for (int n = 0; n < 32; ++n) {
    const int i = n == 0 ? c.T - 1 : (n * 2731) % c.T, h = 1;
    std::vector<double> s(i + 1);
    double m = -1e300;
    for (int j = 0; j <= i; ++j) {
      double acc = 0;
      for (int e = 0; e < HD; ++e)
        acc += static_cast<double>(d.qkv[static_cast<size_t>(i) * ld + h * HD + e]) *
               d.qkv[static_cast<size_t>(j) * ld + c.NH * HD + e];
      s[j] = acc / 8.0;
      m = std::max(m, s[j]);
    }
    double sum = 0;
    for (int j = 0; j <= i; ++j) sum += (s[j] = std::exp(s[j] - m));
    for (int e = 0; e < HD; ++e) {
      double acc = 0;
      for (int j = 0; j <= i; ++j) acc += s[j] * d.qkv[static_cast<size_t>(j) * ld + (c.NH + 1) * HD + e];
      acc /= sum;
      mx = std::max(mx, std::fabs(acc));
      err = std::max(err, std::fabs(acc - f.out[static_cast<size_t>(i) * ldo + h * HD + e]));
    }
  }
  std::printf("T=8192 32 rows vs float64: %.2g\n", err / mx);
  CHECK_MSG(err / mx <= kTol, "T=8192 rows vs float64 %g", err / mx);
}

void test_thread_count_independent(int T) {
  const Case c{2, T, 4, 1, 64, true};
  const Data d = make(c, 7);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const Result one = run_flash(d);
  omp_set_num_threads(std::max(2, threads));
  const Result two = run_flash(d);
  omp_set_num_threads(threads);
  CHECK(std::memcmp(one.out.data(), two.out.data(), one.out.size() * 4) == 0);
  CHECK(std::memcmp(one.lse.data(), two.lse.data(), one.lse.size() * 4) == 0);
  CHECK(std::memcmp(one.dqkv.data(), two.dqkv.data(), one.dqkv.size() * 4) == 0);
}

}  // namespace

int main() {
  test_long_sequence();
  test_against_float64();
  test_thread_count_independent(1024);
  test_thread_count_independent(2048);
  return flotilla_test::summary("test_cpu_attention_flash");
}
