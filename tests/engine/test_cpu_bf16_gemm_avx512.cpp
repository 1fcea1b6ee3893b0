// The hand-written AVX512_BF16 GEMM (engine/cpu/gemm_bf16_avx512.h) and the measured choice
// between it and oneDNN (matmul_bf16.h, bf16_gemm_choice).
//
// On a CPU with AVX512_BF16: the kernel equals the fp64 product of its bf16 operands within fp32
// accumulation (2e-6 of sum |a*b|) for all four transpose cases, beta 0 and 1, K = 0, odd K, K
// over several KC blocks, N over several NC blocks and M, N off the register tile; any slice of
// the output computed alone has the bits of the whole product (so the split across threads cannot
// change a bit); forced on through FLOTILLA_BF16_GEMM=avx512, the linear layers' gemm_bf16 gives
// the same bits on 1, 2 and 3 threads in deterministic mode. The choice: kept figures decide per
// transpose case (the hand kernel only where it is more than 2% faster), FLOTILLA_BF16_GEMM
// overrides, a bad value is a usage error; each is checked in a child process, as the choice is
// made once per process.
// Skipped (passing) without AVX512_BF16 or oneDNN.
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "check.h"
#include "engine/cpu/cpu_features.h"
#include "engine/cpu/gemm_bf16_avx512.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/matmul_bf16.h"

using namespace flotilla;

namespace {

uint32_t g_seed = 2024u;
bf16_t rnd16() {
  g_seed = g_seed * 1664525u + 1013904223u;
  return to_bf16(static_cast<float>((g_seed >> 8) & 0xffff) / 32768.0f - 1.0f);
}

struct Case {
  bool ta, tb;
  int M, N, K;
};

struct Operands {
  Case c;
  int lda, ldb;
  std::vector<bf16_t> A, B;
  float a(int m, int k) const {
    return from_bf16(c.ta ? A[static_cast<size_t>(k) * lda + m] : A[static_cast<size_t>(m) * lda + k]);
  }
  float b(int k, int n) const {
    return from_bf16(c.tb ? B[static_cast<size_t>(n) * ldb + k] : B[static_cast<size_t>(k) * ldb + n]);
  }
};

Operands make(const Case& c) {
  Operands o{c, c.ta ? c.M : c.K, c.tb ? c.K : c.N, {}, {}};
  o.A.resize(static_cast<size_t>(c.M) * c.K);
  o.B.resize(static_cast<size_t>(c.K) * c.N);
  for (auto& x : o.A) x = rnd16();
  for (auto& x : o.B) x = rnd16();
  return o;
}

// Worst |C - ref| / (sum |a*b| + |beta C0|) against fp64 on the bf16 operands.
double kernel_error(const Case& c, float beta) {
  const Operands o = make(c);
  std::vector<float> C(static_cast<size_t>(c.M) * c.N, 0.75f);
  cpu::gemm_bf16_avx512(c.ta, c.tb, c.M, c.N, c.K, o.A.data(), o.lda, o.B.data(), o.ldb, beta, C.data(), c.N);
  double worst = 0;
  for (int m = 0; m < c.M; ++m)
    for (int n = 0; n < c.N; ++n) {
      double ref = beta * 0.75, mag = std::fabs(beta * 0.75);
      for (int k = 0; k < c.K; ++k) {
        const double p = static_cast<double>(o.a(m, k)) * o.b(k, n);
        ref += p, mag += std::fabs(p);
      }
      worst = std::max(worst, std::fabs(C[static_cast<size_t>(m) * c.N + n] - ref) / (mag + 1e-30));
    }
  return worst;
}

// Row and column slices computed alone equal the whole product bit for bit.
bool slices_match(const Case& c) {
  const Operands o = make(c);
  std::vector<float> whole(static_cast<size_t>(c.M) * c.N), parts(whole.size());
  cpu::gemm_bf16_avx512(c.ta, c.tb, c.M, c.N, c.K, o.A.data(), o.lda, o.B.data(), o.ldb, 0.0f, whole.data(),
                        c.N);
  const int ms[] = {0, 17, c.M}, ns[] = {0, 40, c.N};
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j) {
      const int m0 = ms[i], m1 = ms[i + 1], n0 = ns[j], n1 = ns[j + 1];
      const bf16_t* a = c.ta ? o.A.data() + m0 : o.A.data() + static_cast<size_t>(m0) * o.lda;
      const bf16_t* b = c.tb ? o.B.data() + static_cast<size_t>(n0) * o.ldb : o.B.data() + n0;
      cpu::gemm_bf16_avx512(c.ta, c.tb, m1 - m0, n1 - n0, c.K, a, o.lda, b, o.ldb, 0.0f,
                            parts.data() + static_cast<size_t>(m0) * c.N + n0, c.N);
    }
  return std::memcmp(whole.data(), parts.data(), whole.size() * 4) == 0;
}

// The choice made in a child process with env set (and a cache folder holding `figures`); exit
// code: the hand-kernel cases as bits (1 forward, 2 input grad, 4 weight grad), 100 on a throw.
int child_choice(const std::vector<std::string>& env, const std::string& figures) {
  const pid_t pid = fork();
  if (pid == 0) {
    const std::string dir = "/tmp/flotilla-test-bf16-gemm-" + std::to_string(getpid());
    std::filesystem::create_directories(dir);
    if (!figures.empty()) std::ofstream(dir + "/sgemm-choice.json") << figures;
    setenv("FLOTILLA_CACHE_DIR", dir.c_str(), 1);
    for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
    int code = 0;
    try {
      const cpu::Bf16GemmChoice& ch = cpu::bf16_gemm_choice();
      for (int k = 0; k < cpu::kBf16GemmCases; ++k) code |= ch.hand[k] ? 1 << k : 0;
    } catch (const std::exception&) {
      code = 100;
    }
    std::filesystem::remove_all(dir);
    std::_Exit(code);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string figure(int c, double onednn, double hand) {
  return "\"" + cpu::bf16_gemm_choice_key(c) + "\": {\"onednn_gflops\": " + std::to_string(onednn) +
         ", \"openblas_gflops\": " + std::to_string(hand) + ", \"other_load\": 0}";
}

}  // namespace

int main() {
  const cpu::CpuFeatures& f = cpu::cpu_features();
  if (!f.avx512_bf16 || !f.os_avx512 || !cpu::bf16_matmul_refusal().empty()) {
    std::printf("no AVX512_BF16 / oneDNN here: skipped\n");
    return flotilla_test::summary("cpu_bf16_gemm_avx512");
  }
  const Case cases[] = {{false, true, 37, 45, 70},   {false, false, 50, 33, 129},  {true, false, 29, 70, 61},
                        {true, true, 13, 17, 33},    {false, true, 12, 32, 2},     {false, false, 1, 1, 1},
                        {false, true, 150, 70, 700}, {true, false, 41, 100, 1001}, {false, false, 145, 33, 0},
                        {false, true, 20, 1700, 40}, {true, false, 14, 1600, 20}};  // N over NC blocks
  double worst = 0;
  for (const Case& c : cases)
    for (float beta : {0.0f, 1.0f}) {
      const double e = kernel_error(c, beta);
      CHECK_MSG(e < 2e-6, "ta %d tb %d %dx%dx%d beta %g: %.3g", c.ta, c.tb, c.M, c.N, c.K, beta, e);
      worst = std::max(worst, e);
    }
  std::printf("avx512 bf16 kernel: max error / sum|a*b| %.3g against the rounded operands\n", worst);
  for (const Case& c :
       {Case{false, true, 150, 70, 700}, Case{true, false, 41, 100, 1001}, Case{false, false, 50, 90, 129}})
    CHECK_MSG(slices_match(c), "ta %d tb %d: a slice differs from the whole product", c.ta, c.tb);

  // The choice, each in a child: kept figures decide per case (hand > 1.02 x oneDNN), the override wins.
  const std::string kept = "{" + figure(cpu::kBf16Forward, 200, 203) + ", " +
                           figure(cpu::kBf16InputGrad, 200, 250) + ", " +
                           figure(cpu::kBf16WeightGrad, 200, 150) + "}";
  CHECK_MSG(child_choice({}, kept) == 2, "kept figures: got %d", child_choice({}, kept));
  CHECK(child_choice({"FLOTILLA_BF16_GEMM=onednn"}, kept) == 0);
  CHECK(child_choice({"FLOTILLA_BF16_GEMM=avx512"}, kept) == 7);
  CHECK(child_choice({"FLOTILLA_BF16_GEMM=fast"}, kept) == 100);

  // Forced on in this process: the threaded gemm_bf16 is deterministic across thread counts.
  setenv("FLOTILLA_BF16_GEMM", "avx512", 1);
  CHECK(cpu::bf16_gemm_choice().hand[cpu::kBf16InputGrad]);
  CHECK(cpu::bf16_matmul_path().find("avx512 kernel") != std::string::npos);
  cpu::set_thread_independent_gemm(true);
  for (const Case& c :
       {Case{false, true, 200, 96, 130}, Case{false, false, 70, 260, 90}, Case{true, false, 96, 80, 300}}) {
    const Operands o = make(c);
    std::vector<float> ref;
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      std::vector<float> C(static_cast<size_t>(c.M) * c.N, 0.5f);
      cpu::gemm_bf16(c.ta, c.tb, c.M, c.N, c.K, o.A.data(), o.lda, o.B.data(), o.ldb, 1.0f, C.data(), c.N);
      if (ref.empty())
        ref = C;
      else
        CHECK_MSG(std::memcmp(ref.data(), C.data(), C.size() * 4) == 0, "%d threads differ from 1", threads);
    }
  }
  cpu::set_thread_independent_gemm(false);
  return flotilla_test::summary("cpu_bf16_gemm_avx512");
}
