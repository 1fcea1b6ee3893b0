// The CPU's NF4 kernels (engine/cpu/nf4_matmul.h, CpuBackend::nf4_*) against references computed
// here, in double precision, from weights dequantised here by the formula of engine/core/nf4.h.
//
// Modules are random bytes (codes, 8-bit absmax codes) with random fp32 statistics and this test's
// own nested code table; kernels see Views of slices of them (row0 / cb0 offsets, module_cblocks
// larger than the slice's, double-quant groups straddling slice rows), as a tensor-parallel rank
// does. Checked: nf4_dequantize and the bf16 tile step equal the reference values bit for bit
// (every dispatch path: the test reruns itself under FLOTILLA_CPU_PATH=avx2 and =sse); the
// forward (ldo > rows, bias null or not, padding columns untouched) and the backward (ldd > rows
// with NaN in dout's padding, accumulate on and off) within fp32 accumulation of the double
// reference, on fp32 and (where the CPU has it) bf16 matmuls, the latter within fp32 accumulation
// of the bf16-rounded operands and measurably away from the fp32 ones; N = 1 and odd N; K cut
// into several tiles; the same bits for 1, 2 and 3 threads in deterministic mode and run to run
// otherwise; a weight from the engine's quantiser dequantises as nf4::dequantize does, whole and
// sliced; CpuBackend routes to them by matmul_dtype(); malformed Views are refused by name.
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "check.h"
#include "engine/backend/registry.h"
#include "engine/core/nf4.h"
#include "engine/cpu/cpu_features.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/matmul_bf16.h"
#include "engine/cpu/nf4_matmul.h"
#include "nf4_test_module.h"

using namespace flotilla;

namespace {

using nf4_test::g_seed;
using nf4_test::make_module;
using nf4_test::make_slice;
using nf4_test::Module;
using nf4_test::reference_weights;
using nf4_test::rnd;
using nf4_test::Slice;

float r16(float x) { return from_bf16(to_bf16(x)); }

struct Case {
  int mout, min, row0, rows, cb0, cols;
  bool dq;
};

// Exactness of the dequantisation: fp32 through nf4_dequantize, bf16 tiles through the tile step.
void check_dequantize(const Case& c) {
  const Module m = make_module(c.mout, c.min, c.dq, 31u + c.rows);
  const Slice s = make_slice(m, c.row0, c.rows, c.cb0, c.cols);
  const std::vector<float> ref = reference_weights(m, c.row0, c.rows, c.cb0, c.cols);
  std::vector<float> got(ref.size(), -9.0f);
  cpu::nf4_dequantize(got.data(), s.v);
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) bad += std::memcmp(&got[i], &ref[i], 4) != 0;
  CHECK_MSG(bad == 0, "nf4_dequantize (%s, dq %d, %dx%d at %d,%d): %d of %zu values differ",
            cpu::nf4_dequant_path(), c.dq, c.rows, c.cols, c.row0, c.cb0, bad, ref.size());
  // A tile that starts inside the slice (r0 > 0, c0 > 0), written ld apart.
  const int r0 = c.rows / 3, r1 = c.rows, c0 = c.cols > 64 ? 64 : 0, c1 = c.cols, ld = c1 - c0 + 7;
  std::vector<bf16_t> t16(static_cast<size_t>(r1 - r0) * ld, bf16_t{0x7777});
  std::vector<float> t32(t16.size(), -9.0f);
  cpu::nf4_dequantize_tile(t16.data(), ld, s.v, r0, r1, c0, c1);
  cpu::nf4_dequantize_tile(t32.data(), ld, s.v, r0, r1, c0, c1);
  int bad16 = 0, bad32 = 0, pad = 0;
  for (int r = r0; r < r1; ++r)
    for (int j = 0; j < ld; ++j) {
      const size_t at = static_cast<size_t>(r - r0) * ld + j;
      if (c0 + j >= c1) {
        pad += t16[at].bits != 0x7777 || t32[at] != -9.0f;
        continue;
      }
      const float want = ref[static_cast<size_t>(r) * c.cols + c0 + j];
      bad16 += t16[at].bits != to_bf16(want).bits;
      bad32 += std::memcmp(&t32[at], &want, 4) != 0;
    }
  CHECK_MSG(bad16 == 0 && bad32 == 0 && pad == 0,
            "tile (%s): %d bf16, %d fp32 values differ, %d padding written", cpu::nf4_dequant_path(), bad16,
            bad32, pad);
}

// The cases: slices with offsets inside wider modules, groups of 256 blocks straddling rows.
const Case kCases[] = {
    {200, 384, 37, 150, 2, 192, true},    // rows and column blocks offset; 6-block module rows
    {96, 1024, 10, 70, 5, 704, true},     // 16 blocks a row: groups change inside slice rows
    {64, 448, 0, 64, 0, 448, false},      // a whole module, fp32 absmax
    {700, 1280, 0, 700, 0, 1280, false},  // K cut into tiles, rows into several tiles
    {530, 1152, 3, 520, 1, 1088, true},   // the same with double quant and offsets
};

double rel(double got, double ref, double mag) { return std::fabs(got - ref) / (mag + 1e-30); }

struct Result {
  double err = 0;                // worst |got - ref| / sum |terms|, operands as the kernel rounds them
  double err_fp32 = 0;           // the same against unrounded fp32 operands
  std::vector<float> out, dinp;  // for the bitwise comparisons
  bool padding_ok = true;
};

// Forward and backward of one case at N tokens, threads, against the double reference.
Result run_case(const Case& c, int N, bool bias_on, bool accumulate, bool bf16, int threads, bool fixed) {
  const Module m = make_module(c.mout, c.min, c.dq, 31u + c.rows);
  const Slice s = make_slice(m, c.row0, c.rows, c.cb0, c.cols);
  const std::vector<float> w = reference_weights(m, c.row0, c.rows, c.cb0, c.cols);
  const int rows = c.rows, cols = c.cols, ldo = rows + 5, ldd = rows + 3;
  g_seed = 777u + static_cast<uint32_t>(N * 13 + rows);
  std::vector<float> inp(static_cast<size_t>(N) * cols), bias(rows), dout(static_cast<size_t>(N) * ldd),
      dinp0(static_cast<size_t>(N) * cols);
  for (auto& x : inp) x = rnd();
  for (auto& x : bias) x = rnd();
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < ldd; ++j)
      dout[static_cast<size_t>(n) * ldd + j] = j < rows ? rnd() : std::numeric_limits<float>::quiet_NaN();
  for (auto& x : dinp0) x = rnd();

  Result res;
  res.out.assign(static_cast<size_t>(N) * ldo, 7.0f);
  res.dinp = dinp0;
  cpu::set_thread_independent_gemm(fixed);
  omp_set_num_threads(threads);
  cpu::nf4_matmul_forward(res.out.data(), ldo, inp.data(), s.v, bias_on ? bias.data() : nullptr, N, bf16);
  cpu::nf4_matmul_backward(res.dinp.data(), dout.data(), ldd, s.v, N, accumulate, bf16);
  cpu::set_thread_independent_gemm(false);
  omp_set_num_threads(2);

  auto op = [&](float x) { return bf16 ? r16(x) : x; };
  for (int n = 0; n < N; ++n) {
    for (int r = 0; r < rows; ++r) {
      double ref = bias_on ? bias[r] : 0.0, ref32 = ref, mag = std::fabs(ref), mag32 = mag;
      for (int k = 0; k < cols; ++k) {
        const float a = inp[static_cast<size_t>(n) * cols + k], b = w[static_cast<size_t>(r) * cols + k];
        const double p = static_cast<double>(op(a)) * op(b), p32 = static_cast<double>(a) * b;
        ref += p, mag += std::fabs(p), ref32 += p32, mag32 += std::fabs(p32);
      }
      const float got = res.out[static_cast<size_t>(n) * ldo + r];
      res.err = std::max(res.err, rel(got, ref, mag));
      res.err_fp32 = std::max(res.err_fp32, rel(got, ref32, mag32));
      if (std::isnan(got)) res.err = 1e30;
    }
    for (int j = rows; j < ldo; ++j) res.padding_ok &= res.out[static_cast<size_t>(n) * ldo + j] == 7.0f;
  }
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < cols; ++k) {
      const double prior = accumulate ? dinp0[static_cast<size_t>(n) * cols + k] : 0.0;
      double ref = prior, ref32 = prior, mag = std::fabs(prior), mag32 = mag;
      for (int r = 0; r < rows; ++r) {
        const float a = dout[static_cast<size_t>(n) * ldd + r], b = w[static_cast<size_t>(r) * cols + k];
        const double p = static_cast<double>(op(a)) * op(b), p32 = static_cast<double>(a) * b;
        ref += p, mag += std::fabs(p), ref32 += p32, mag32 += std::fabs(p32);
      }
      const float got = res.dinp[static_cast<size_t>(n) * cols + k];
      res.err = std::max(res.err, std::isnan(got) ? 1e30 : rel(got, ref, mag));
      res.err_fp32 = std::max(res.err_fp32, rel(got, ref32, mag32));
    }
  return res;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void check_numerics(bool bf16) {
  const char* mode = bf16 ? "bf16" : "fp32";
  double worst = 0, worst32 = 0;
  for (const Case& c : kCases)
    for (int N : {1, 67, 131}) {
      if (c.rows * static_cast<long>(c.cols) * N > 40'000'000L) continue;  // keep the reference quick
      for (int variant = 0; variant < 4; ++variant) {
        const bool bias_on = variant & 1, accumulate = variant & 2;
        const Result r = run_case(c, N, bias_on, accumulate, bf16, 2, variant == 3);
        CHECK_MSG(r.padding_ok, "%s forward wrote out's columns beyond rows (%dx%d, N %d)", mode, c.rows,
                  c.cols, N);
        CHECK_MSG(r.err < 1e-5, "%s %dx%d at (%d,%d) dq %d N %d bias %d acc %d: error %.3g", mode, c.rows,
                  c.cols, c.row0, c.cb0, c.dq, N, bias_on, accumulate, r.err);
        worst = std::max(worst, r.err), worst32 = std::max(worst32, r.err_fp32);
      }
    }
  std::printf(
      "%s matmuls (dequant %s): max error / sum|terms| %.3g against the operands as rounded, %.3g "
      "against fp32 operands\n",
      mode, cpu::nf4_dequant_path(), worst, worst32);
  if (bf16) {
    CHECK_MSG(worst32 < 0x1p-7, "bf16 against fp32 operands: %.3g (bound 2^-7)", worst32);
    CHECK_MSG(worst32 > 1e-5, "bf16 against fp32 operands: %.3g, too exact (operands not rounded?)", worst32);
  }
  // One thread (so one item holds the whole weight): the depth cut into several tiles with bf16's
  // 2048-deep tiles too, forward (2560 columns) and backward (2112 rows).
  for (const Case& c : {Case{512, 2560, 0, 512, 0, 2560, true}, Case{2112, 512, 0, 2112, 0, 512, false}}) {
    const Result r = run_case(c, 67, true, true, bf16, 1, false);
    CHECK_MSG(r.err < 1e-5 && r.padding_ok, "%s %dx%d on one thread: error %.3g", mode, c.rows, c.cols,
              r.err);
  }
  // Several tiles along K in both directions (Case 3: 700 x 1280), N = 1 and 131 on 1..3 threads.
  for (const Case& c : {kCases[3], kCases[4], kCases[0]})
    for (int N : {1, 131}) {
      const Result a = run_case(c, N, true, true, bf16, 1, true);
      const Result b = run_case(c, N, true, true, bf16, 2, true);
      const Result d = run_case(c, N, true, true, bf16, 3, true);
      CHECK_MSG(same_bits(a.out, b.out) && same_bits(a.out, d.out),
                "%s forward %dx%d N %d: deterministic mode "
                "differs across 1/2/3 threads",
                mode, c.rows, c.cols, N);
      CHECK_MSG(same_bits(a.dinp, b.dinp) && same_bits(a.dinp, d.dinp),
                "%s backward %dx%d N %d: deterministic "
                "mode differs across 1/2/3 threads",
                mode, c.rows, c.cols, N);
      const Result e = run_case(c, N, true, false, bf16, 3, false),
                   f = run_case(c, N, true, false, bf16, 3, false);
      CHECK_MSG(same_bits(e.out, f.out) && same_bits(e.dinp, f.dinp),
                "%s %dx%d N %d: two runs on 3 threads differ", mode, c.rows, c.cols, N);
      CHECK(a.err < 1e-5 && d.err < 1e-5 && e.err < 1e-5);
    }
}

// A weight quantised by the engine's quantiser (engine/core/nf4.cpp, bitsandbytes' format, its
// dynamic map as code2): the kernels' values equal nf4::dequantize's bit for bit, whole and for a
// tensor-parallel rank's row and column slices, with and without double quantisation.
void check_quantizer() {
  const int out = 300, in = 640;
  g_seed = 2024u;
  std::vector<float> x(static_cast<size_t>(out) * in);
  for (auto& v : x) v = 0.02f * (rnd() + rnd() + rnd());
  for (bool dq : {true, false}) {
    const nf4::Quantized q = nf4::quantize(x.data(), static_cast<int64_t>(x.size()), {out, in}, dq);
    std::vector<float> want(x.size());
    nf4::dequantize(q, want.data());
    Module m;
    m.out = out, m.in = in, m.dq = dq, m.packed = q.packed, m.absmax = q.absmax, m.absmax_q = q.absmax_q;
    m.absmax2 = q.absmax2, m.offset = q.offset;
    if (dq) m.code2.assign(nf4::dynamic_map(), nf4::dynamic_map() + 256);
    for (const Case& c : {Case{out, in, 0, out, 0, in, dq}, Case{out, in, 150, 150, 0, in, dq},
                          Case{out, in, 0, out, 5, 320, dq}}) {
      const Slice s = make_slice(m, c.row0, c.rows, c.cb0, c.cols);
      std::vector<float> got(static_cast<size_t>(c.rows) * c.cols);
      cpu::nf4_dequantize(got.data(), s.v);
      int bad = 0;
      for (int r = 0; r < c.rows; ++r)
        for (int k = 0; k < c.cols; ++k)
          bad += std::memcmp(&got[static_cast<size_t>(r) * c.cols + k],
                             &want[static_cast<size_t>(c.row0 + r) * in + c.cb0 * 64 + k], 4) != 0;
      CHECK_MSG(bad == 0,
                "quantised weight (dq %d), slice %dx%d at (%d,%d): %d values differ from nf4::dequantize", dq,
                c.rows, c.cols, c.row0, c.cb0, bad);
    }
  }
}

// The backend's overrides: the same results as the free functions, the dtype from matmul_dtype().
void check_backend() {
  Backend& be = get_backend("cpu");
  const Case c = kCases[1];
  const Module m = make_module(c.mout, c.min, c.dq, 5u);
  const Slice s = make_slice(m, c.row0, c.rows, c.cb0, c.cols);
  const int N = 9;
  std::vector<float> inp(static_cast<size_t>(N) * c.cols), bias(c.rows),
      dout(static_cast<size_t>(N) * c.rows);
  for (auto& x : inp) x = rnd();
  for (auto& x : bias) x = rnd();
  for (auto& x : dout) x = rnd();
  const bool have_bf16 = cpu::bf16_matmul_refusal().empty();
  for (bool bf16 : {false, true}) {
    if (bf16 && !have_bf16) continue;
    be.set_matmul_dtype(bf16 ? DType::kBF16 : DType::kF32);
    std::vector<float> o1(static_cast<size_t>(N) * c.rows), o2 = o1, d1(inp.size()), d2 = d1,
                                                            w1(c.rows * c.cols);
    be.nf4_matmul_forward(o1.data(), c.rows, inp.data(), s.v, bias.data(), N);
    cpu::nf4_matmul_forward(o2.data(), c.rows, inp.data(), s.v, bias.data(), N, bf16);
    be.nf4_matmul_backward(d1.data(), dout.data(), c.rows, s.v, N, false);
    cpu::nf4_matmul_backward(d2.data(), dout.data(), c.rows, s.v, N, false, bf16);
    CHECK_MSG(same_bits(o1, o2) && same_bits(d1, d2), "CpuBackend's nf4 matmuls (%s) differ from the kernels",
              bf16 ? "bf16" : "fp32");
    be.nf4_dequantize(w1.data(), s.v);
    CHECK(same_bits(w1, reference_weights(m, c.row0, c.rows, c.cb0, c.cols)));
  }
  be.set_matmul_dtype(DType::kF32);
  // bf16 storage is the GPU's: the CPU backend refuses it by name.
  CHECK_THROWS(be.nf4_dequantize(static_cast<bf16_t*>(nullptr), s.v), "nf4_dequantize");
  // Malformed views.
  nf4::View bad = s.v;
  bad.cols = 100;
  std::vector<float> sink(1024);
  CHECK_THROWS(be.nf4_dequantize(sink.data(), bad), "multiple of 64");
  bad = s.v;
  bad.cb0 = c.min / 64 - 1;
  CHECK_THROWS(be.nf4_matmul_forward(sink.data(), c.rows, inp.data(), bad, nullptr, 1), "beyond the module");
  bad = s.v;
  bad.absmax2 = nullptr;
  CHECK_THROWS(be.nf4_matmul_backward(sink.data(), dout.data(), c.rows, bad, 1, false), "absmax2");
}

}  // namespace

int main(int argc, char** argv) {
  // --dequant-only: the exactness checks alone, for the reruns under a narrower FLOTILLA_CPU_PATH.
  const bool dequant_only = argc > 1 && std::strcmp(argv[1], "--dequant-only") == 0;
  for (const Case& c : kCases) check_dequantize(c);
  std::printf("dequantisation exact on path %s\n", cpu::nf4_dequant_path());
  if (dequant_only) return flotilla_test::summary("nf4_kernels (dequant)");

  for (const char* path : {"avx2", "sse"}) {
    if (std::strcmp(path, "avx2") == 0 && !(cpu::cpu_features().avx2 && cpu::cpu_features().os_avx)) continue;
    const std::string cmd = std::string("FLOTILLA_CPU_PATH=") + path + " '" + argv[0] + "' --dequant-only";
    const int rc = std::system(cmd.c_str());
    CHECK_MSG(rc == 0, "%s: exit status %d", cmd.c_str(), rc);
  }
  check_numerics(false);
  const std::string why = cpu::bf16_matmul_refusal();
  if (why.empty()) {
    std::printf("bf16 path: %s\n", cpu::bf16_matmul_path().c_str());
    check_numerics(true);
  } else {
    std::printf("bf16 matmuls not available here (%s): bf16 numerics skipped\n", why.c_str());
  }
  check_quantizer();
  check_backend();
  return flotilla_test::summary("nf4_kernels");
}
