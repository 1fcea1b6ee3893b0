// flotilla-worker bench-nf4: QLoRA's 4-bit matmuls (engine/cpu/nf4_matmul.h) against the dense
// matmul of the same shape, measured in the same run on the same threads.
//
// Non-obvious decision: the dense baseline is the engine's own GEMM as the nf4 kernel calls it
// (the threaded sgemm; for bf16, oneDNN's bf16 gemm on a weight already in bf16, with the
// activations rounded per call as the nf4 path rounds them), so the ratio is the cost of the
// dequantisation and tiling alone. The weights are random codes with random statistics: the
// kernels' speed does not depend on the values.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/backend/backend.h"
#include "engine/backend/cuda_plugin.h"
#include "engine/cli/ab_timing.h"
#include "engine/cli/args.h"
#include "engine/cli/commands.h"
#include "engine/core/cpu_load.h"
#include "engine/core/error.h"
#include "engine/core/nf4.h"
#include "engine/cpu/blas.h"
#include "engine/cpu/cpu_features.h"
#include "engine/cpu/matmul.h"
#include "engine/cpu/matmul_bf16.h"
#include "engine/cpu/nf4_matmul.h"
#include "engine/cpu/onednn.h"

namespace flotilla::cli {
namespace {

const char* kHelp =
    "Usage: flotilla-worker bench-nf4 [--tokens N] [--shapes OUTxIN,...] [--threads T] [--reps R]\n"
    "                                 [--dtype fp32|bf16|both] [--device cpu|cuda] [--deterministic] "
    "[--json]\n\n"
    "GFLOP/s of the NF4 (QLoRA 4-bit base) matmul forward (out = x W^T) and input gradient (dx = dy W)\n"
    "against the dense matmul of the same shape in the same run, and their ratio (nf4 / dense: by wall\n"
    "time, and on the CPU by process CPU time, steadier on a shared machine); the CPU model and\n"
    "the kernel paths. Shapes are the weight's OUT x IN (e.g. 4096x4096: Llama-3-8B's q_proj).\n"
    "Defaults: --tokens 2048 --shapes 576x576,1536x576,4096x4096,14336x4096 --threads 0 (all cores)\n"
    "--reps 5 (best of, nf4 and dense alternating), --device cpu (cuda: the CUDA kernels against cuBLASLt,\n"
    "fp32 and bf16 storage), --dtype both (bf16 where the CPU has it).\n";

struct Module {
  std::vector<uint8_t> packed, absmax_q;
  std::vector<float> absmax2, code2;
  nf4::View v;
};

Module random_module(int out, int in) {
  Module m;
  uint32_t s = 12345u + static_cast<uint32_t>(out) * 7u + static_cast<uint32_t>(in);
  auto next = [&] { return s = s * 1664525u + 1013904223u; };
  const int64_t blocks = static_cast<int64_t>(out) * in / nf4::kBlock;
  m.packed.resize(static_cast<size_t>(out) * in / 2);
  for (auto& b : m.packed) b = static_cast<uint8_t>(next() >> 24);
  m.absmax_q.resize(blocks);
  for (auto& b : m.absmax_q) b = static_cast<uint8_t>(next() >> 24);
  m.absmax2.assign((blocks + nf4::kGroup - 1) / nf4::kGroup, 0.02f);
  m.code2.resize(256);
  for (int i = 0; i < 256; ++i) m.code2[i] = (i - 127.5f) / 128.0f;
  m.v.rows = out, m.v.cols = in, m.v.packed = m.packed.data(), m.v.absmax_q = m.absmax_q.data();
  m.v.absmax2 = m.absmax2.data(), m.v.code2 = m.code2.data(), m.v.offset = 0.03f;
  m.v.module_cblocks = in / nf4::kBlock;
  return m;
}

bool parse_shape(const std::string& s, int* out, int* in) {
  const size_t x = s.find('x');
  if (x == std::string::npos) return false;
  try {
    *out = std::stoi(s.substr(0, x));
    *in = std::stoi(s.substr(x + 1));
  } catch (...) {
    return false;
  }
  return *out > 0 && *in > 0 && *in % nf4::kBlock == 0;
}

// The four times (nf4 forward, dense forward, nf4 input gradient, dense input gradient) on the
// CUDA backend, fp32 or bf16 storage: the View's arrays uploaded, the dense weight dequantised
// on the device, the dense products cuBLASLt's (Backend::matmul_forward / matmul_backward).
template <typename S>
std::array<double, 4> time_device(Backend& be, const Module& m, int O, int I, int N, int reps) {
  std::vector<float*> owned;
  auto alloc = [&](size_t bytes) {
    owned.push_back(be.allocate((bytes + 3) / 4));
    return owned.back();
  };
  auto put = [&](const void* host, size_t bytes) {
    float* d = alloc(bytes);
    be.upload(d, host, bytes);
    return d;
  };
  nf4::View v = m.v;
  v.packed = reinterpret_cast<const uint8_t*>(put(m.packed.data(), m.packed.size()));
  v.absmax_q = reinterpret_cast<const uint8_t*>(put(m.absmax_q.data(), m.absmax_q.size()));
  v.absmax2 = put(m.absmax2.data(), m.absmax2.size() * 4);
  v.code2 = put(m.code2.data(), m.code2.size() * 4);
  auto act = [&](size_t n, int mod) {
    std::vector<S> h(n);
    for (size_t i = 0; i < n; ++i) {
      const float x = static_cast<float>(i % mod) * 0.01f - 0.06f;
      if constexpr (sizeof(S) == 2)
        h[i] = to_bf16(x);
      else
        h[i] = x;
    }
    return reinterpret_cast<S*>(put(h.data(), n * sizeof(S)));
  };
  S* x = act(static_cast<size_t>(N) * I, 17);
  S* dy = act(static_cast<size_t>(N) * O, 13);
  S* y = reinterpret_cast<S*>(alloc(static_cast<size_t>(N) * O * sizeof(S)));
  S* dx = reinterpret_cast<S*>(alloc(static_cast<size_t>(N) * I * sizeof(S)));
  S* w = reinterpret_cast<S*>(alloc(static_cast<size_t>(O) * I * sizeof(S)));
  be.nf4_dequantize(w, v);
  auto synced = [&](std::function<void()> fn) {
    return std::function<void()>([&be, fn] {
      fn();
      be.synchronize();
    });
  };
  const Best f = best_seconds(reps, synced([&] { be.nf4_matmul_forward(y, O, x, v, nullptr, N); }),
                              synced([&] { be.matmul_forward(y, x, w, nullptr, N, I, O, nullptr); }));
  const Best b = best_seconds(reps, synced([&] { be.nf4_matmul_backward(dx, dy, O, v, N, false); }),
                              synced([&] { be.matmul_backward(dx, nullptr, nullptr, dy, x, w, N, I, O); }));
  for (float* p : owned) be.release(p);
  return {f.a, f.b, b.a, b.b};
}

}  // namespace

int cmd_bench_nf4(const CommandArgs& argv) {
  Args args(argv);
  if (args.flag("--help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  const int N = static_cast<int>(args.int_or("--tokens", 2048));
  const std::string shapes_arg = args.value_or("--shapes", "576x576,1536x576,4096x4096,14336x4096");
  const int threads = static_cast<int>(args.int_or("--threads", 0));
  const int reps = static_cast<int>(args.int_or("--reps", 5));
  const std::string dtype = args.value_or("--dtype", "both");
  const bool deterministic = args.flag("--deterministic");
  const bool json = args.flag("--json");
  const std::string device = args.value_or("--device", "cpu");
  args.finish("bench-nf4");
  if (device != "cpu" && device != "cuda")
    throw_usage("bench-nf4: --device " + device + " is not supported; use cpu or cuda");
  const bool gpu = device == "cuda";
  if (N < 1 || reps < 1 || threads < 0)
    throw_usage("bench-nf4: --tokens and --reps must be >= 1, --threads >= 0");
  if (dtype != "fp32" && dtype != "bf16" && dtype != "both")
    throw_usage("bench-nf4: --dtype " + dtype + " is not supported; use fp32, bf16 or both");
  std::vector<std::pair<int, int>> shapes;
  for (size_t at = 0; at <= shapes_arg.size();) {
    const size_t comma = std::min(shapes_arg.find(',', at), shapes_arg.size());
    int out = 0, in = 0;
    if (!parse_shape(shapes_arg.substr(at, comma - at), &out, &in))
      throw_usage("bench-nf4: --shapes: '" + shapes_arg.substr(at, comma - at) +
                  "' is not OUTxIN with IN a multiple of 64 (e.g. 4096x4096)");
    shapes.emplace_back(out, in);
    at = comma + 1;
  }
  const std::string bf16_refusal = gpu ? "" : cpu::bf16_matmul_refusal();
  if (dtype == "bf16" && !bf16_refusal.empty()) throw_config("bench-nf4 --dtype bf16: " + bf16_refusal);
  const bool run_fp32 = dtype != "bf16", run_bf16 = dtype != "fp32" && bf16_refusal.empty();

  omp_set_num_threads(threads > 0 ? threads : omp_get_num_procs());
  const int nt = omp_get_max_threads();
  cpu::set_thread_independent_gemm(deterministic);
  cpu::blas_single_thread();
  const cpu::CpuFeatures& f = cpu::cpu_features();
  const cpu::BlasInfo& blas = cpu::blas_info();

  Backend* be = gpu ? &cuda_plugin::require("bench-nf4 --device cuda").backend() : nullptr;
  if (be != nullptr) be->set_deterministic(deterministic);
  const LoadWindow load;
  nlohmann::json rows = nlohmann::json::array();
  std::vector<std::string> lines;
  for (const auto& [O, I] : shapes) {
    Module m = random_module(O, I);
    const double flops = 2.0 * N * static_cast<double>(O) * I;
    auto gf = [&](double s) { return flops / s / 1e9; };
    std::vector<float> w, x, y, dy, dx;
    if (!gpu) {
      w.resize(static_cast<size_t>(O) * I), x.resize(static_cast<size_t>(N) * I);
      y.resize(static_cast<size_t>(N) * O), dy.resize(static_cast<size_t>(N) * O), dx.resize(x.size());
      cpu::nf4_dequantize(w.data(), m.v);
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17) * 0.01f - 0.08f;
      for (size_t i = 0; i < dy.size(); ++i) dy[i] = static_cast<float>(i % 13) * 0.01f - 0.06f;
    }
    for (int pass = 0; pass < 2; ++pass) {
      const bool bf16 = pass == 1;
      if (bf16 ? !run_bf16 : !run_fp32) continue;
      std::array<double, 4> t{};
      std::array<double, 2> cpu_ratio{0, 0};  // dense / nf4 process CPU time (CPU only)
      if (gpu) {
        t = bf16 ? time_device<bf16_t>(*be, m, O, I, N, reps) : time_device<float>(*be, m, O, I, N, reps);
      } else {
        std::function<void()> dense_f, dense_b;
        std::vector<bf16_t> w16, x16, dy16;
        if (!bf16) {
          dense_f = [&] { cpu::matmul_forward(y.data(), x.data(), w.data(), nullptr, N, I, O); };
          dense_b = [&] {
            cpu::gemm(false, false, N, I, O, 1.0f, dy.data(), O, w.data(), I, 0.0f, dx.data(), I);
          };
        } else {
          w16.resize(w.size()), x16.resize(x.size()), dy16.resize(dy.size());
          cpu::round_to_bf16(w16.data(), w.data(), w.size());
          dense_f = [&] {
            cpu::round_to_bf16(x16.data(), x.data(), x.size());
            cpu::gemm_bf16(false, true, N, O, I, x16.data(), I, w16.data(), I, 0.0f, y.data(), O);
          };
          dense_b = [&] {
            cpu::round_to_bf16(dy16.data(), dy.data(), dy.size());
            cpu::gemm_bf16(false, false, N, I, O, dy16.data(), O, w16.data(), I, 0.0f, dx.data(), I);
          };
        }
        const Best f = best_seconds(
            reps, [&] { cpu::nf4_matmul_forward(y.data(), O, x.data(), m.v, nullptr, N, bf16); }, dense_f);
        const Best b = best_seconds(
            reps, [&] { cpu::nf4_matmul_backward(dx.data(), dy.data(), O, m.v, N, false, bf16); }, dense_b);
        t = {f.a, f.b, b.a, b.b};
        cpu_ratio = {f.cpu_b / f.cpu_a, b.cpu_b / b.cpu_a};
      }
      const double nf4_fwd = t[0], dense_fwd = t[1], nf4_bwd = t[2], dense_bwd = t[3];
      char line[512], fcpu[48] = "", bcpu[48] = "";
      if (!gpu) {
        std::snprintf(fcpu, sizeof fcpu, " (CPU time %.2f)", cpu_ratio[0]);
        std::snprintf(bcpu, sizeof bcpu, " (CPU time %.2f)", cpu_ratio[1]);
      }
      std::snprintf(line, sizeof line,
                    "%5dx%-5d N=%d %s: forward nf4 %7.1f GFLOP/s, dense %7.1f, ratio %.2f%s | input grad nf4 "
                    "%7.1f GFLOP/s, dense %7.1f, ratio %.2f%s",
                    O, I, N, bf16 ? "bf16" : "fp32", gf(nf4_fwd), gf(dense_fwd), dense_fwd / nf4_fwd, fcpu,
                    gf(nf4_bwd), gf(dense_bwd), dense_bwd / nf4_bwd, bcpu);
      lines.push_back(line);
      if (!json) std::printf("%s\n", line), std::fflush(stdout);
      nlohmann::json row = {{"out", O},
                            {"in", I},
                            {"tokens", N},
                            {"dtype", bf16 ? "bf16" : "fp32"},
                            {"forward_gflops", gf(nf4_fwd)},
                            {"forward_dense_gflops", gf(dense_fwd)},
                            {"backward_gflops", gf(nf4_bwd)},
                            {"backward_dense_gflops", gf(dense_bwd)}};
      if (!gpu) row["forward_ratio_cpu_time"] = cpu_ratio[0], row["backward_ratio_cpu_time"] = cpu_ratio[1];
      rows.push_back(row);
    }
  }
  const std::string device_line = gpu ? be->describe() : "";
  const std::string cpu_line = f.brand + " (" + cpu::describe_features(f) + "), " + std::to_string(nt) +
                               (nt == 1 ? " thread" : " threads") + (deterministic ? ", deterministic" : "");
  const std::string path_line =
      gpu ? std::string(
                "CUDA: SIMT 128x128 tiles, W dequantised per 32-deep slab into shared memory; dense: "
                "cuBLASLt; fp32 and bf16 storage")
          : std::string("dequantisation ") + cpu::nf4_dequant_path() + "; fp32 GEMM " + blas.sgemm_library +
                "; bf16 GEMM " + (run_bf16 ? cpu::bf16_matmul_path() : "not run (" + bf16_refusal + ")");
  if (json) {
    nlohmann::json j;
    j["cpu"] = cpu_line;
    if (gpu) j["device"] = device_line;
    j["paths"] = path_line;
    j["results"] = rows;
    j["other_cpu_load"] = load.other_load();
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("cpu: %s\n%s%skernels: %s\n", cpu_line.c_str(), gpu ? "device: " : "",
                gpu ? (device_line + "\n").c_str() : "", path_line.c_str());
    const double other = load.other_load();
    std::printf("other processes used %.0f%% of the CPUs meanwhile%s\n", other * 100,
                other > 0.05
                    ? ": the figures (each the best of --reps) are noisy; rerun when the machine is idle"
                    : "");
  }
  return 0;
}

}  // namespace flotilla::cli
