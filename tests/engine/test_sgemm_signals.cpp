// Issue 39's heap corruption: signals that arrive while a thread runs the fp32 sgemm must be
// handled on that thread's own stack. oneDNN 2.6's JIT f32 gemm points RSP at its heap workspace
// (onednn.h, "Signals"), so a handler running meanwhile had its frame written over the heap, and
// glibc aborted later with "corrupted size vs. prev_size" (the one full-suite abort seen while
// oneDNN's sgemm was the default, at a SIGUSR1 checkpoint request).
//
// Each library runs in its own process (the sgemm library is chosen once per process): a worker
// thread multiplies the model's kind of shapes (K well above the kernel's 84-deep stack buffer,
// all transpose cases) in a loop while a second thread sends it SIGUSR1 every 100 us. The handler
// reads the interrupted RSP from its ucontext and counts the signals taken with RSP outside the
// worker's stack: there must be none, the handler must have run (at least ten times; once per product at most
// while deferred), the products must still be right and the heap must still be sound (the process frees and
// exits normally). Without the signal deferral in onednn.cpp the oneDNN child counts thousands of off-stack
// frames (or aborts in glibc first).
#include <pthread.h>
#include <signal.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "engine/core/bf16.h"
#include "engine/cpu/blas.h"
#include "engine/cpu/cpu_features.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/onednn.h"
#include "test_reference_ops.h"
#include "worker_run.h"

using namespace flotilla;
using namespace flotilla_test;

namespace {

std::atomic<uintptr_t> g_stack_lo{0}, g_stack_hi{0};
std::atomic<long> g_handled{0}, g_off_stack{0};
static_assert(std::atomic<long>::is_always_lock_free, "the handler needs lock-free counters");

void on_usr1(int, siginfo_t*, void* ctx) {
  const auto* uc = static_cast<const ucontext_t*>(ctx);
  const auto rsp = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RSP]);
  if (rsp < g_stack_lo.load() || rsp > g_stack_hi.load()) g_off_stack.fetch_add(1);
  g_handled.fetch_add(1);
}

struct Case {
  bool ta, tb;
  int M, N, K;
};

// Max |C - fp64 reference| / sum |a b| for one product (fresh buffers each call: the heap churns).
double one_product(const Case& c, bool bf16) {
  const int lda = c.ta ? c.M : c.K, ldb = c.tb ? c.K : c.N;
  std::vector<float> A(static_cast<size_t>(c.M) * c.K), B(static_cast<size_t>(c.K) * c.N),
      C(static_cast<size_t>(c.M) * c.N, 0.0f);
  uint32_t x = 7u + static_cast<uint32_t>(c.M + c.N + c.K);
  auto rnd = [&] {
    x = x * 1664525u + 1013904223u;
    return static_cast<float>((x >> 8) & 0xffff) / 32768.0f - 1.0f;
  };
  for (auto& v : A) v = rnd();
  for (auto& v : B) v = rnd();
  if (bf16) {  // round the inputs to bf16 so the fp64 reference sees the same operands
    std::vector<bf16_t> a16(A.size()), b16(B.size());
    for (size_t i = 0; i < A.size(); ++i) A[i] = from_bf16(a16[i] = to_bf16(A[i]));
    for (size_t i = 0; i < B.size(); ++i) B[i] = from_bf16(b16[i] = to_bf16(B[i]));
    cpu::onednn_gemm_bf16(c.ta, c.tb, c.M, c.N, c.K, a16.data(), lda, b16.data(), ldb, 0.0f, C.data(), c.N);
  } else {
    cpu::gemm_serial(c.ta, c.tb, c.M, c.N, c.K, 1.0f, A.data(), lda, B.data(), ldb, 0.0f, C.data(), c.N);
  }
  double worst = 0;
  for (int i = 0; i < c.M; i += 7)
    for (int j = 0; j < c.N; j += 5) {
      const flotilla_test::RefDot d =
          flotilla_test::ref_gemm_entry(c.ta, c.tb, A.data(), lda, B.data(), ldb, i, j, c.K);
      double ref = d.value;
      const double mag = d.magnitude;
      worst = std::max(worst, std::fabs(C[static_cast<size_t>(i) * c.N + j] - ref) / (mag + 1e-30));
    }
  return worst;
}

int child(const std::string& lib) {
  const cpu::BlasInfo& info = cpu::blas_info();
  std::printf("child %s: sgemm %s (%s)\n", lib.c_str(), info.sgemm_library.c_str(),
              info.sgemm_choice.c_str());
  CHECK(info.onednn_sgemm == (lib == "onednn"));
  const bool bf16 =
      lib == "onednn" && cpu::choose_kernel_path(cpu::cpu_features()).bf16 != cpu::KernelPath::kSse;
  struct sigaction sa {};
  sa.sa_sigaction = on_usr1;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR1, &sa, nullptr);

  std::atomic<bool> ready{false}, done{false};
  double worst = 0, worst_bf16 = 0;
  long products = 0;
  std::thread worker([&] {
    pthread_attr_t attr;
    void* base = nullptr;
    size_t size = 0;
    pthread_getattr_np(pthread_self(), &attr);
    pthread_attr_getstack(&attr, &base, &size);
    pthread_attr_destroy(&attr);
    g_stack_lo = reinterpret_cast<uintptr_t>(base);
    g_stack_hi = reinterpret_cast<uintptr_t>(base) + size;
    ready = true;
    // Per-thread slices of training shapes: forward (NT), input gradient (NN), weight gradient (TN).
    const Case cases[] = {{false, true, 256, 192, 576},
                          {false, false, 96, 160, 768},
                          {true, false, 192, 96, 512},
                          {true, true, 64, 80, 400}};
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(700);
    for (int i = 0; std::chrono::steady_clock::now() < until; ++i) {
      worst = std::max(worst, one_product(cases[i % 4], false));
      if (bf16 && i % 4 == 3) worst_bf16 = std::max(worst_bf16, one_product(cases[i % 4], true));
      ++products;
    }
    done = true;
  });
  while (!ready) std::this_thread::yield();
  long sent = 0;
  while (!done) {
    pthread_kill(worker.native_handle(), SIGUSR1);
    ++sent;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  worker.join();
  std::printf(
      "child %s: %ld products, %ld signals sent, %ld handled, %ld with RSP off the thread's stack; "
      "max error / sum|a*b| %.3g (bf16 %.3g)\n",
      lib.c_str(), products, sent, g_handled.load(), g_off_stack.load(), worst, worst_bf16);
  CHECK_MSG(g_handled.load() >= 10, "only %ld signals handled", g_handled.load());
  CHECK_MSG(g_off_stack.load() == 0, "%ld signal frames written off the thread's stack", g_off_stack.load());
  CHECK_MSG(worst < 2e-6, "fp32 error %.3g", worst);
  CHECK_MSG(worst_bf16 < 1e-5, "bf16 error %.3g", worst_bf16);  // fp32 accumulation of bf16 products
  // The heap is still sound: churn it (glibc checks chunk headers as it splits and merges).
  std::vector<std::vector<char>> churn(64);
  for (int i = 0; i < 4000; ++i)
    churn[(i * 31) % 64].assign(static_cast<size_t>(1 + (i * 7919) % 100000), 'x');
  return summary(("sgemm_signals (child " + lib + ")").c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[1]) == "--child") return child(argv[2]);
  std::vector<std::string> libs = {"openblas"};
  if (cpu::onednn_info().loaded) libs.push_back("onednn");
  const std::string dir = fresh_dir("sgemm-signals");
  for (const std::string& lib : libs) {
    const std::string log = dir + "/" + lib + ".log";
    const int code = wait_exit(spawn({"/proc/self/exe", "--child", lib}, {"FLOTILLA_SGEMM=" + lib}, log));
    std::fputs(read_file(log).c_str(), stdout);
    CHECK_MSG(code == 0, "%s child exit %d", lib.c_str(), code);
  }
  return summary("sgemm_signals");
}
