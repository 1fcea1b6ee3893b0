// QLoRA's NF4 kernels on the GPU (engine/cuda/nf4.h) against their CPU twins (engine/cpu/nf4_matmul.h)
// and a double reference, fp32 and bf16 storage. Skips without a device.
//
// Views of slices of random modules (tests/tools/nf4_test_module.h: row0 / cb0 offsets, double
// quantisation on and off, groups straddling rows) uploaded to device memory. Checked:
// nf4_dequantize equals the CPU's values bit for bit (fp32) and their bf16 rounding bit for bit;
// the forward (ldo > rows, bias or none, padding columns untouched) and the backward (ldd > rows
// with NaN in dout's padding, accumulate on and off) at N = 1, 67 and 131 (not multiples of the
// 128-token tile) and weights whose rows and columns are not multiples of the 128 tile or the
// 32-deep slab: fp32 within fp32 accumulation of the CPU twin and of the double reference; bf16
// storage within the output's bf16 rounding of the double reference on the bf16-rounded operands
// (and of the CPU's bf16 twin where this CPU has bf16 matmuls); two runs give the same bits; the
// CudaBackend overrides give the kernels' bits; a weight from the engine's quantiser dequantises on
// the device as nf4::dequantize does; a malformed View is refused by name.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/backend/registry.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/matmul_bf16.h"
#include "engine/cpu/nf4_matmul.h"
#include "engine/cuda/context.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/nf4.h"
#include "gpu_test_util.h"
#include "nf4_test_module.h"

namespace fc = flotilla::cuda;
namespace cpu = flotilla::cpu;
using namespace flotilla;
using gpu_test::DeviceBuf;
using nf4_test::make_module;
using nf4_test::make_slice;
using nf4_test::Module;
using nf4_test::reference_weights;
using nf4_test::rnd;
using nf4_test::Slice;

namespace {

template <typename T>
constexpr bool kBf16 = sizeof(T) == 2;

// Raw bytes in device memory.
template <typename E>
class DeviceArray {
 public:
  explicit DeviceArray(const std::vector<E>& host) {
    fc::check_cuda(cudaMalloc(&p_, std::max<size_t>(1, host.size()) * sizeof(E)), "cudaMalloc (test)");
    if (!host.empty())
      fc::check_cuda(cudaMemcpy(p_, host.data(), host.size() * sizeof(E), cudaMemcpyHostToDevice), "upload");
  }
  ~DeviceArray() { cudaFree(p_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  const E* get() const { return p_; }

 private:
  E* p_ = nullptr;
};

// A slice's arrays on the device and the View over them.
struct DeviceSlice {
  DeviceArray<uint8_t> packed, absmax_q;
  DeviceArray<float> absmax, absmax2, code2;
  nf4::View v;
  DeviceSlice(const Module& m, const Slice& s)
      : packed(s.packed), absmax_q(s.absmax_q), absmax(s.absmax), absmax2(m.absmax2), code2(m.code2), v(s.v) {
    v.packed = packed.get();
    if (m.dq) {
      v.absmax_q = absmax_q.get(), v.absmax2 = absmax2.get(), v.code2 = code2.get();
    } else {
      v.absmax = absmax.get();
    }
  }
};

struct Case {
  int mout, min, row0, rows, cb0, cols;
  bool dq;
};
const Case kCases[] = {
    {200, 384, 37, 150, 2, 192, true},    // offsets; rows not a multiple of 128 or 32
    {96, 1024, 10, 70, 5, 704, true},     // groups change inside slice rows; cols 704 = 5.5 tiles
    {64, 448, 0, 64, 0, 448, false},      // a whole module, fp32 absmax
    {300, 1280, 0, 300, 0, 1280, false},  // several tiles both ways
};

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

template <typename T>
void check_dequantize(fc::Context& ctx, const Case& c) {
  const Module m = make_module(c.mout, c.min, c.dq, 31u + c.rows);
  const Slice s = make_slice(m, c.row0, c.rows, c.cb0, c.cols);
  const DeviceSlice d(m, s);
  std::vector<float> want(static_cast<size_t>(c.rows) * c.cols);
  cpu::nf4_dequantize(want.data(), s.v);
  CHECK(want == reference_weights(m, c.row0, c.rows, c.cb0, c.cols));
  DeviceBuf<T> out(want.size());
  fc::nf4_dequantize<T>(ctx, out.get(), d.v);
  const std::vector<float> got = out.download();
  int bad = 0;
  for (size_t i = 0; i < want.size(); ++i)
    bad += bits(got[i]) != bits(kBf16<T> ? gpu_test::round_bf16(want[i]) : want[i]);
  CHECK_MSG(bad == 0, "nf4_dequantize (%s, %dx%d at %d,%d, dq %d): %d of %zu values differ from the CPU's",
            kBf16<T> ? "bf16" : "fp32", c.rows, c.cols, c.row0, c.cb0, c.dq, bad, want.size());
}

// Forward and backward of one case against the double reference (operands as the storage type
// rounds them) and, where given, the CPU twin. Returns the worst error as a fraction of its bound.
template <typename T>
double check_matmuls(fc::Context& ctx, const Case& c, int N, bool bias_on, bool accumulate) {
  const char* type = kBf16<T> ? "bf16" : "fp32";
  const Module m = make_module(c.mout, c.min, c.dq, 31u + c.rows);
  const Slice s = make_slice(m, c.row0, c.rows, c.cb0, c.cols);
  const DeviceSlice d(m, s);
  const int rows = c.rows, cols = c.cols, ldo = rows + 5, ldd = rows + 3;
  auto st = [](float x) { return kBf16<T> ? gpu_test::round_bf16(x) : x; };  // as stored
  std::vector<float> w = reference_weights(m, c.row0, rows, c.cb0, cols);
  for (auto& x : w) x = st(x);
  nf4_test::g_seed = 99u + static_cast<uint32_t>(N * 7 + rows);
  std::vector<float> inp(static_cast<size_t>(N) * cols), bias(rows), dout(static_cast<size_t>(N) * ldd),
      dinp0(static_cast<size_t>(N) * cols), out0(static_cast<size_t>(N) * ldo, 7.0f);
  for (auto& x : inp) x = st(rnd());
  for (auto& x : bias) x = st(rnd());
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < ldd; ++j)
      dout[static_cast<size_t>(n) * ldd + j] = j < rows ? st(rnd()) : std::numeric_limits<float>::quiet_NaN();
  for (auto& x : dinp0) x = st(rnd());

  DeviceBuf<T> d_inp(inp), d_bias(bias), d_dout(dout), d_out(out0), d_dinp(dinp0);
  fc::nf4_matmul_forward<T>(ctx, d_out.get(), ldo, d_inp.get(), d.v, bias_on ? d_bias.get() : nullptr, N);
  fc::nf4_matmul_backward<T>(ctx, d_dinp.get(), d_dout.get(), ldd, d.v, N, accumulate);
  const std::vector<float> out = d_out.download(), dinp = d_dinp.download();

  // The CPU twin, fp32 matmuls on fp32 storage (the GPU's fp32 compute), bf16 where it has them.
  const bool twin = !kBf16<T> || cpu::bf16_matmul_refusal().empty();
  std::vector<float> cpu_out(out0), cpu_dinp(dinp0);
  if (twin) {
    cpu::nf4_matmul_forward(cpu_out.data(), ldo, inp.data(), s.v, bias_on ? bias.data() : nullptr, N,
                            kBf16<T>);
    cpu::nf4_matmul_backward(cpu_dinp.data(), dout.data(), ldd, s.v, N, accumulate, kBf16<T>);
  }
  // Bounds: fp32 accumulation of both (1e-5 of sum |terms|); bf16 storage adds the output's
  // rounding (2^-8 of |value|: the sum is exact to fp32, then rounded once to bf16).
  const double out_round = kBf16<T> ? 0x1p-8 : 0.0;
  double worst = 0;
  int bad = 0, pad = 0;
  auto check = [&](float got, float cpu_v, double ref, double mag) {
    const double bound = 1e-5 * mag + out_round * std::fabs(ref) + 1e-30;
    double e = std::fabs(got - ref) / bound;
    if (twin) e = std::max(e, std::fabs(got - cpu_v) / (bound + 1e-5 * mag));
    if (std::isnan(got)) e = 1e30;
    worst = std::max(worst, e);
    bad += !(e <= 1.0);
  };
  for (int n = 0; n < N; ++n) {
    for (int r = 0; r < rows; ++r) {
      double ref = bias_on ? bias[r] : 0.0, mag = std::fabs(ref);
      for (int k = 0; k < cols; ++k) {
        const double p = static_cast<double>(inp[static_cast<size_t>(n) * cols + k]) *
                         w[static_cast<size_t>(r) * cols + k];
        ref += p, mag += std::fabs(p);
      }
      const size_t at = static_cast<size_t>(n) * ldo + r;
      check(out[at], cpu_out[at], ref, mag);
    }
    for (int j = rows; j < ldo; ++j) pad += out[static_cast<size_t>(n) * ldo + j] != 7.0f;
  }
  for (int n = 0; n < N; ++n)
    for (int k = 0; k < cols; ++k) {
      const size_t at = static_cast<size_t>(n) * cols + k;
      double ref = accumulate ? dinp0[at] : 0.0, mag = std::fabs(ref);
      for (int r = 0; r < rows; ++r) {
        const double p = static_cast<double>(dout[static_cast<size_t>(n) * ldd + r]) *
                         w[static_cast<size_t>(r) * cols + k];
        ref += p, mag += std::fabs(p);
      }
      check(dinp[at], cpu_dinp[at], ref, mag);
    }
  CHECK_MSG(
      bad == 0 && pad == 0,
      "%s %dx%d at (%d,%d) dq %d N %d bias %d accumulate %d: %d values beyond the bound (worst %.3g of it), "
      "%d padding values written",
      type, rows, cols, c.row0, c.cb0, c.dq, N, bias_on, accumulate, bad, worst, pad);

  // Run to run: the same bits.
  DeviceBuf<T> d_out2(out0), d_dinp2(dinp0);
  fc::nf4_matmul_forward<T>(ctx, d_out2.get(), ldo, d_inp.get(), d.v, bias_on ? d_bias.get() : nullptr, N);
  fc::nf4_matmul_backward<T>(ctx, d_dinp2.get(), d_dout.get(), ldd, d.v, N, accumulate);
  CHECK(d_out2.download() == out && d_dinp2.download() == dinp);
  return worst;
}

template <typename T>
void test_type(fc::Context& ctx) {
  for (const Case& c : kCases) check_dequantize<T>(ctx, c);
  double worst = 0;
  for (const Case& c : kCases)
    for (int N : {1, 67, 131})
      for (int variant = 0; variant < 4; ++variant) {
        if (c.rows * static_cast<long>(c.cols) * N > 20'000'000L && variant != 3) continue;  // simulator time
        worst = std::max(worst, check_matmuls<T>(ctx, c, N, variant & 1, variant & 2));
      }
  std::printf("  nf4 matmuls %s: worst error %.3f of the bound\n", kBf16<T> ? "bf16" : "fp32", worst);
}

// A weight from the engine's quantiser (bitsandbytes' format, its dynamic map): the device's
// values equal nf4::dequantize's bit for bit (fp32) and their bf16 rounding, for a row slice.
void test_quantizer(fc::Context& ctx) {
  const int out = 200, in = 512, row0 = 64, rows = 136;
  nf4_test::g_seed = 77u;
  std::vector<float> x(static_cast<size_t>(out) * in);
  for (auto& v : x) v = 0.02f * (rnd() + rnd() + rnd());
  const nf4::Quantized q = nf4::quantize(x.data(), static_cast<int64_t>(x.size()), {out, in}, true);
  std::vector<float> want(x.size());
  nf4::dequantize(q, want.data());
  Module m;
  m.out = out, m.in = in, m.dq = true, m.packed = q.packed, m.absmax_q = q.absmax_q, m.absmax2 = q.absmax2;
  m.offset = q.offset;
  m.code2.assign(nf4::dynamic_map(), nf4::dynamic_map() + 256);
  const Slice s = make_slice(m, row0, rows, 0, in);
  const DeviceSlice d(m, s);
  DeviceBuf<float> o32(static_cast<size_t>(rows) * in);
  DeviceBuf<gpu_test::bf16> o16(o32.size());
  fc::nf4_dequantize<float>(ctx, o32.get(), d.v);
  fc::nf4_dequantize<gpu_test::bf16>(ctx, o16.get(), d.v);
  const std::vector<float> g32 = o32.download(), g16 = o16.download();
  int bad = 0;
  for (size_t i = 0; i < g32.size(); ++i) {
    const float w = want[static_cast<size_t>(row0) * in + i];
    bad += bits(g32[i]) != bits(w) || bits(g16[i]) != bits(gpu_test::round_bf16(w));
  }
  CHECK_MSG(bad == 0, "quantised weight on the device: %d of %zu values differ from nf4::dequantize", bad,
            g32.size());
}

// The backend's overrides give the kernels' bits; a malformed View is refused by name.
void test_backend(fc::Context& ctx) {
  Backend& gpu = get_backend("cuda");
  const Case c = kCases[1];
  const Module m = make_module(c.mout, c.min, c.dq, 5u);
  const Slice s = make_slice(m, c.row0, c.rows, c.cb0, c.cols);
  const DeviceSlice d(m, s);
  const int N = 9;
  const auto x = gpu_test::random_vec(static_cast<size_t>(N) * c.cols, 3, 1, true),
             dy = gpu_test::random_vec(static_cast<size_t>(N) * c.rows, 4, 1, true);
  DeviceBuf<float> d_x(x), d_dy(dy), o1(static_cast<size_t>(N) * c.rows), o2(o1.size()), g1(x.size()),
      g2(x.size());
  gpu.nf4_matmul_forward(o1.get(), c.rows, d_x.get(), d.v, nullptr, N);
  fc::nf4_matmul_forward<float>(ctx, o2.get(), c.rows, d_x.get(), d.v, nullptr, N);
  gpu.nf4_matmul_backward(g1.get(), d_dy.get(), c.rows, d.v, N, false);
  fc::nf4_matmul_backward<float>(ctx, g2.get(), d_dy.get(), c.rows, d.v, N, false);
  gpu.synchronize();
  CHECK(o1.download() == o2.download() && g1.download() == g2.download());
  DeviceBuf<gpu_test::bf16> b_x(x), b1(static_cast<size_t>(N) * c.rows), b2(b1.size());
  gpu.nf4_matmul_forward(reinterpret_cast<bf16_t*>(b1.get()), c.rows,
                         reinterpret_cast<const bf16_t*>(b_x.get()), d.v, nullptr, N);
  fc::nf4_matmul_forward<gpu_test::bf16>(ctx, b2.get(), c.rows, b_x.get(), d.v, nullptr, N);
  gpu.synchronize();
  CHECK(b1.download() == b2.download());
  nf4::View bad = d.v;
  bad.cols = 100;
  CHECK_THROWS(gpu.nf4_dequantize(o1.get(), bad), "multiple of 64");
}

}  // namespace

int main() {
  if (gpu_test::skip_without_gpu()) return flotilla_test::summary("gpu_nf4_kernels");
  cpu::blas_single_thread();
  {
    fc::Context ctx;
    test_type<float>(ctx);
    test_type<gpu_test::bf16>(ctx);
    test_quantizer(ctx);
    test_backend(ctx);
  }
  return flotilla_test::summary("gpu_nf4_kernels");
}
