// bf16 linear layers: round the operands into scratch, then oneDNN per output slice (see
// matmul_bf16.h for the scheme and onednn.h for the library choice).
#include "engine/cpu/matmul_bf16.h"

#include <immintrin.h>

#include <vector>

#include "engine/cpu/blas.h"
#include "engine/cpu/gemm_split.h"
#include "engine/cpu/onednn.h"

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

}  // namespace

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
  for_each_gemm_slice(M, N, [&](const GemmSlice& s) {
    if (s.m1 <= s.m0 || s.n1 <= s.n0) return;
    const bf16_t* a = trans_a ? A + s.m0 : A + static_cast<size_t>(s.m0) * lda;
    const bf16_t* b = trans_b ? B + static_cast<size_t>(s.n0) * ldb : B + s.n0;
    float* c = C + static_cast<size_t>(s.m0) * ldc + s.n0;
    onednn_gemm_bf16(trans_a, trans_b, s.m1 - s.m0, s.n1 - s.n0, K, a, lda, b, ldb, beta, c, ldc);
  });
}

void matmul_forward_bf16(float* out, const float* inp, const float* weight, const float* bias, int N, int IC,
                         int OC) {
  Scratch& sc = scratch();
  const bf16_t* x = rounded(sc.inp, inp, static_cast<size_t>(N) * IC);         // (N, IC)
  const bf16_t* w = rounded(sc.weight, weight, static_cast<size_t>(OC) * IC);  // (OC, IC)
  for_each_gemm_slice(N, OC, [&](const GemmSlice& s) {
    if (s.m1 <= s.m0 || s.n1 <= s.n0) return;
    onednn_gemm_bf16(false, true, s.m1 - s.m0, s.n1 - s.n0, IC, x + static_cast<size_t>(s.m0) * IC, IC,
                     w + static_cast<size_t>(s.n0) * IC, IC, 0.0f,
                     out + static_cast<size_t>(s.m0) * OC + s.n0, OC);
    if (bias != nullptr) add_bias(out, bias, s, OC);
  });
}

void matmul_backward_bf16(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, int N, int IC, int OC) {
  Scratch& sc = scratch();
  const bf16_t* d = rounded(sc.dout, dout, static_cast<size_t>(N) * OC);  // (N, OC)
  if (dinp != nullptr) {
    const bf16_t* w = rounded(sc.weight, weight, static_cast<size_t>(OC) * IC);  // (OC, IC)
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
  return std::string(kernel_path_name(c.bf16)) + " (oneDNN " + lib.version +
         (impl.empty() ? "" : " " + impl) + ")";
}

}  // namespace flotilla::cpu
